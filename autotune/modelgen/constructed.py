"""Models with constructed weights: they compute at full cost and predict exactly, made in
seconds to a minute on the machine that serves them (nothing that large can be copied there).

The weights are set, not trained: each layer computes at full cost and adds nothing, the head
follows the demo language (``modelgen.predictable``), and the MTP draft is right for a seeded
share ``mtp_acceptance`` of the tokens. Each weight: docs/models.md#constructed-weights."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.core.space.model_facts import ModelInfo
from autotune.errors import ConfigError
from autotune.modelgen.checkpoints import ModelShape, hf_config, write_tokenizer
from autotune.modelgen.predictable import RESERVED, successor_map
from autotune.shell.bench.files import read_model_info

INFO = "constructed.json"


@dataclass(frozen=True)
class ConstructedShape:
    """A GLM-4-MoE shape; the vocabulary equals the hidden size (one-hot embeddings)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    num_experts: int
    experts_per_tok: int
    moe_intermediate_size: int
    native_context: int = 32768

    @property
    def params(self) -> int:
        h, hd = self.hidden_size, self.hidden_size // self.num_heads
        attn = 2 * h * h + 2 * self.num_kv_heads * hd * h
        moe = (self.num_experts + 1) * 3 * self.moe_intermediate_size * h + self.num_experts * h
        return (self.num_layers + 1) * (attn + moe) + 2 * h * h + 2 * h * h  # + MTP, emb, head, eh_proj


SHAPES = {
    # For a CPU check at small size: vLLM's CPU build serves it in seconds.
    "tiny": ConstructedShape(hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                             num_experts=4, experts_per_tok=2, moe_intermediate_size=128),
    # About 25 GB in bf16 (12.6 B parameters; 16 experts, 8 per token, so that like the
    # reference study's model most weights are read at every decode step even at concurrency
    # 2): a step reads 10-20 GB, several ms on an H200, far above vLLM's per-step overhead.
    "moe-25g": ConstructedShape(hidden_size=6144, num_layers=16, num_heads=48, num_kv_heads=8,
                                num_experts=16, experts_per_tok=8, moe_intermediate_size=2048),
}


def _shape_of(s: ConstructedShape) -> ModelShape:
    return ModelShape(hidden_size=s.hidden_size, intermediate_size=s.moe_intermediate_size,
                      num_layers=s.num_layers, num_heads=s.num_heads,
                      num_kv_heads=s.num_kv_heads, vocab_size=s.hidden_size,
                      native_context=s.native_context, num_experts=s.num_experts,
                      moe_intermediate_size=s.moe_intermediate_size,
                      experts_per_tok=s.experts_per_tok)


def _layer(prefix: str, s: ConstructedShape, gen, device, dtype) -> dict:
    """One decoder layer that computes everything and adds nothing to the residual stream."""
    import torch

    h, hd, inter = s.hidden_size, s.hidden_size // s.num_heads, s.moe_intermediate_size

    def rand(*size):
        return (torch.randn(*size, generator=gen, device=device) * 0.02).to(dtype).cpu()

    def zeros(*size):
        return torch.zeros(*size, dtype=dtype)

    t = {
        "input_layernorm.weight": torch.ones(h, dtype=dtype),
        "post_attention_layernorm.weight": torch.ones(h, dtype=dtype),
        "self_attn.q_proj.weight": rand(s.num_heads * hd, h),
        "self_attn.k_proj.weight": rand(s.num_kv_heads * hd, h),
        "self_attn.v_proj.weight": rand(s.num_kv_heads * hd, h),
        "self_attn.o_proj.weight": zeros(h, s.num_heads * hd),
        "mlp.gate.weight": rand(s.num_experts, h),
        "mlp.gate.e_score_correction_bias": torch.zeros(s.num_experts, dtype=torch.float32),
        "mlp.shared_experts.gate_proj.weight": rand(inter, h),
        "mlp.shared_experts.up_proj.weight": rand(inter, h),
        "mlp.shared_experts.down_proj.weight": zeros(h, inter),
    }
    for e in range(s.num_experts):
        t[f"mlp.experts.{e}.gate_proj.weight"] = rand(inter, h)
        t[f"mlp.experts.{e}.up_proj.weight"] = rand(inter, h)
        t[f"mlp.experts.{e}.down_proj.weight"] = zeros(h, inter)
    return {prefix + k: v.contiguous() for k, v in t.items()}


def mtp_map(vocab: int, acceptance: float, seed: int) -> list[int]:
    """g: g[y] == y for a seeded share ``acceptance`` of the non-special ids, another id for
    the rest (so the MTP head's draft f(g(y)) is wrong there)."""
    import torch

    gen = torch.Generator().manual_seed(seed + 23)
    ids = (torch.randperm(vocab - RESERVED, generator=gen) + RESERVED).tolist()
    wrong = ids[: round((1 - acceptance) * len(ids))]
    g = list(range(vocab))
    for i, y in enumerate(wrong):  # each wrong id points at the next one: never itself
        g[y] = wrong[(i + 1) % len(wrong)] if len(wrong) > 1 else (y % (vocab - RESERVED)) + RESERVED
    return g


def made_line(info: ModelInfo, out: str | Path, seconds: float, *, shape: str,
              mtp_acceptance: float) -> str:
    """What `make-model --constructed` says it wrote, with the model's own description."""
    return (f"wrote a constructed {shape} GLM-4-MoE+MTP model ({info.num_experts} experts, MTP "
            f"right for {mtp_acceptance:.0%} of tokens) to {out} in {seconds:.1f} s: "
            f"{(Path(out) / INFO).read_text().strip()}")


def make_constructed(out: str | Path, *, shape: str, mtp_acceptance: float, seed: int = 0,
                     reuse_base: str | Path | None = None, device: str | None = None) -> ModelInfo:
    """Write a constructed GLM-4-MoE+MTP checkpoint (see the module doc) to ``out``."""
    if shape not in SHAPES:
        raise ConfigError(f"--constructed {shape!r}: valid shapes are {', '.join(SHAPES)}")
    if not 0.0 <= mtp_acceptance <= 1.0:
        raise ConfigError(f"--mtp-acceptance {mtp_acceptance}: must be between 0 and 1")
    import torch
    from safetensors.torch import save_file

    s = SHAPES[shape]
    path = Path(out)
    base = Path(reuse_base) if reuse_base else None
    if base is not None:
        info = json.loads((base / INFO).read_text()) if (base / INFO).exists() else {}
        if info.get("shape") != shape or info.get("seed") != seed:
            raise ConfigError(f"--reuse-base {base}: not a constructed {shape!r} model of seed "
                              f"{seed} (its {INFO} says {info.get('shape')!r}, seed {info.get('seed')})")
    path.mkdir(parents=True, exist_ok=True)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16
    t0 = time.monotonic()
    h, vocab = s.hidden_size, s.hidden_size
    f = successor_map(vocab, seed)
    weight_map: dict[str, str] = {}
    total = 0

    def shard(name: str, tensors: dict) -> None:
        nonlocal total
        save_file(tensors, str(path / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, name))
        total += sum(t.numel() * t.element_size() for t in tensors.values())

    def link(name: str) -> None:
        nonlocal total
        target = path / name
        if target.exists():
            target.unlink()
        os.link(base / name, target)
        from safetensors import safe_open

        with safe_open(str(target), "pt") as fh:
            for key in fh.keys():  # noqa: SIM118 (safe_open has no __iter__)
                weight_map[key] = name
        total += target.stat().st_size

    head = torch.zeros(vocab, h, dtype=dtype)
    head[torch.tensor(f), torch.arange(vocab)] = 1  # row f(x) reads direction x
    names = ["embed-head.safetensors"] + [f"layer-{i:03d}.safetensors" for i in range(s.num_layers)]
    if base is not None:
        for name in names:
            link(name)
    else:
        shard(names[0], {"model.embed_tokens.weight": torch.eye(vocab, h, dtype=dtype),
                         "lm_head.weight": head, "model.norm.weight": torch.ones(h, dtype=dtype)})
        for i in range(s.num_layers):
            gen = torch.Generator(device=device).manual_seed(seed * 1000 + i)
            shard(names[i + 1], _layer(f"model.layers.{i}.", s, gen, device, dtype))
    n = s.num_layers
    gen = torch.Generator(device=device).manual_seed(seed * 1000 + n)
    mtp = _layer(f"model.layers.{n}.", s, gen, device, dtype)
    g = mtp_map(vocab, mtp_acceptance, seed)
    eh = torch.zeros(h, 2 * h, dtype=dtype)
    eh[torch.tensor(g), torch.arange(vocab)] = 1  # embedding half: y -> g(y); hidden half: 0
    prefix = f"model.layers.{n}."
    mtp.update({prefix + "enorm.weight": torch.ones(h, dtype=dtype),
                prefix + "hnorm.weight": torch.ones(h, dtype=dtype),
                prefix + "shared_head.norm.weight": torch.ones(h, dtype=dtype),
                prefix + "eh_proj.weight": eh})
    shard("mtp.safetensors", mtp)
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=1))
    config = hf_config("moe", _shape_of(s), mtp=True)
    config.architectures = ["Glm4MoeForCausalLM"]
    cfg = config.to_dict()
    cfg.update(head_dim=h // s.num_heads, num_nextn_predict_layers=1, dtype="bfloat16")
    (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    write_tokenizer(path, vocab, plain_words=False)  # its language and tests read ids as t<id>
    right = sum(g[y] == y for y in range(RESERVED, vocab)) / (vocab - RESERVED)
    (path / INFO).write_text(json.dumps({
        "language": "token after x is f(x), f a seeded random permutation (as the trained demo model)",
        "shape": shape, "dimensions": asdict(s), "seed": seed, "parameters": s.params,
        "bytes": total, "mtp_acceptance": mtp_acceptance, "mtp_right_share": round(right, 4),
        "base_linked_from": str(base) if base else None,
        "seconds": round(time.monotonic() - t0, 1), "device": device,
    }, indent=2) + "\n")
    return read_model_info(str(path))
