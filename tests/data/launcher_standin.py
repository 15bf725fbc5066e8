"""A stand-in for vLLM's entry module (no vLLM), for tests/shell/server/test_preimported.py: run by the
pre-imported launcher as ``__main__``, it prints what it was given as one JSON line, then exits
with the code it is told, or sleeps until it is killed."""

import json
import os
import sys
import time

IMPORTED_AT = time.time()  # set once, when the launcher imports this module

if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps({
        "args": args, "cwd": os.getcwd(), "marker": os.environ.get("STANDIN_MARKER"),
        "pid": os.getpid(), "sid": os.getsid(0),
        "preimported": "tests.data.launcher_standin" in sys.modules,
    }), flush=True)
    if args[:1] == ["sleep"]:
        time.sleep(600)
    sys.exit(int(args[1]) if args[:1] == ["exit"] else 0)
