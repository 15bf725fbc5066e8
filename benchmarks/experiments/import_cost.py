"""What scikit-learn costs every vLLM process: fresh interpreters, interleaved, import vLLM's API
server as installed and with scikit-learn's tree (sklearn, scipy, narwhals, joblib,
threadpoolctl) unimportable; prints wall and CPU seconds and the paired difference
(docs/startup.md, "Ours in it").

    .venv/bin/python benchmarks/experiments/import_cost.py 5    # pairs
"""

import statistics
import subprocess
import sys

BLOCK = ["sklearn", "scipy", "narwhals", "joblib", "threadpoolctl"]
CODE = ("import sys, time\n{block}t, c = time.perf_counter(), time.process_time()\n"
        "import vllm.entrypoints.openai.api_server\n"
        "print(time.perf_counter() - t, time.process_time() - c)")


def main(pairs: int) -> None:
    wall: dict[str, list[float]] = {"as installed": [], "without scikit-learn": []}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    for _ in range(pairs):
        for name in wall:
            block = "".join(f"sys.modules[{m!r}] = None\n" for m in BLOCK) if name != "as installed" else ""
            out = subprocess.run([sys.executable, "-c", CODE.format(block=block)],
                                 capture_output=True, text=True, check=True).stdout.split()
            wall[name].append(float(out[0]))
            cpu[name].append(float(out[1]))
            print(name, out, flush=True)
    for label, runs in (("wall", wall), ("cpu", cpu)):
        for name, xs in runs.items():
            print(f"{label} {name}: mean {statistics.mean(xs):.2f} s, sd {statistics.stdev(xs):.2f}")
        d = [a - b for a, b in zip(*runs.values(), strict=True)]
        print(f"{label} paired difference: mean {statistics.mean(d):.2f} s, sd {statistics.stdev(d):.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]))
