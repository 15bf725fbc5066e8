"""Tiny local Hugging Face checkpoints that vLLM's CPU build serves (no downloads): random weights,
deterministic for a seed; a dense Llama-style model and a GLM-4-MoE-style mixture of experts,
optionally with one MTP layer written explicitly (transformers does not save MTP weights).
Shapes measured to work on the CPU build: head_dim 64, 4 heads, 2 KV heads (TP 2 divides both).
torch and transformers are imported lazily: they come with the ``cpu``/``gpu`` extras."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from autotune.core.space.model_facts import ModelInfo
from autotune.core.workload.datasets.synthetic import WORDS
from autotune.errors import ConfigError
from autotune.shell.bench.files import read_model_info

MODEL_KINDS = ("dense", "moe")
SPECIAL = ("<unk>", "<s>", "</s>")



@dataclass(frozen=True)
class ModelShape:
    """Sizes of a tiny model. Defaults were measured to serve with TP 2 on the CPU build."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    vocab_size: int = 512
    native_context: int = 32768
    num_experts: int = 4
    moe_intermediate_size: int = 128
    experts_per_tok: int = 2


# The model `autotune run` generates on the CPU build: a native context the shipped spaces'
# 81920 tokens fit without YaRN, so that their configurations deploy rather than being rejected
# (issue #41). Its folder name says so (study.run.study_plan.GENERATED_MODEL), so that a model
# generated before at 32768 tokens is not taken for it.
RUN_SHAPE = ModelShape(native_context=131072)


def planned_model_info(out: str | Path, *, kind: str, mtp: bool, shape: ModelShape = ModelShape()) -> ModelInfo:
    """What ``make_model`` would write to ``out``, without writing it (a dry run)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if kind == "moe":
        rope["partial_rotary_factor"] = 0.5
    return ModelInfo(
        name=str(out), architecture="Glm4MoeForCausalLM" if kind == "moe" else "LlamaForCausalLM",
        is_moe=kind == "moe", num_experts=shape.num_experts if kind == "moe" else 0,
        mtp_layers=1 if mtp else 0, native_context=shape.native_context,
        num_attention_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
        vocab_size=shape.vocab_size, rope_parameters=rope,
    )


def write_config(out: str | Path, *, kind: str, mtp: bool, shape: ModelShape = ModelShape()) -> Path:
    """The config.json and tokenizer ``make_model`` would write to ``out``, without weights:
    enough for vLLM's parser and config checks (a dry run checks flags against it)."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    hf_config(kind, shape, mtp).save_pretrained(path)
    write_tokenizer(path, shape.vocab_size)
    cfg = json.loads((path / "config.json").read_text())
    cfg["head_dim"] = shape.hidden_size // shape.num_heads
    # What saving the model adds: vLLM resolves the architecture (and MTP) from it.
    cfg["architectures"] = ["Glm4MoeForCausalLM" if kind == "moe" else "LlamaForCausalLM"]
    cfg["dtype"] = "bfloat16"
    (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return path


def write_tokenizer(out: Path, vocab_size: int, *, plain_words: bool = True) -> None:
    """A word-level tokenizer: token ``i`` is ``t<i>``, except (``plain_words``) that the first
    ids after the special tokens are the plain words `make-workload` writes, one token each."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # Plain words first (the text of `make-workload` is one token a word here), then t<id>.
    named = list(dict.fromkeys([*SPECIAL, *(WORDS if plain_words else ())]))[:vocab_size]
    words = named + [f"t{i}" for i in range(len(named), vocab_size)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    # A plain template so that /v1/chat/completions works too: the messages' text, in order.
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(out)


def hf_config(kind: str, shape: ModelShape, mtp: bool):
    from transformers import Glm4MoeConfig, LlamaConfig

    common = dict(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.native_context, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False,
    )
    if kind == "dense":
        return LlamaConfig(head_dim=shape.hidden_size // shape.num_heads, **common)
    return Glm4MoeConfig(
        n_routed_experts=shape.num_experts, n_shared_experts=1,
        num_experts_per_tok=shape.experts_per_tok,
        moe_intermediate_size=shape.moe_intermediate_size, first_k_dense_replace=0,
        n_group=1, topk_group=1, num_mtp_layers=1 if mtp else 0, **common,
    )


def _mtp_tensors(state: dict, shape: ModelShape, generator) -> dict:
    """One MTP layer as vLLM's Glm4MoeMTP expects: a copy of the last decoder layer at index
    ``num_layers`` plus its projection and norms (random projection: it will not predict)."""
    import torch

    last, new = f"model.layers.{shape.num_layers - 1}.", f"model.layers.{shape.num_layers}."
    extra = {new + k[len(last):]: v.clone() for k, v in state.items() if k.startswith(last)}
    h = shape.hidden_size
    dtype = next(iter(state.values())).dtype
    extra[new + "enorm.weight"] = torch.ones(h, dtype=dtype)
    extra[new + "hnorm.weight"] = torch.ones(h, dtype=dtype)
    extra[new + "shared_head.norm.weight"] = torch.ones(h, dtype=dtype)
    extra[new + "eh_proj.weight"] = (
        torch.randn(h, 2 * h, generator=generator) * 0.02
    ).to(dtype)
    return extra


def _unfuse_experts(state: dict) -> dict:
    """Per-expert tensors (``experts.{e}.gate_proj.weight`` ...), the layout of published
    GLM-4-MoE checkpoints: transformers 5 saves experts fused, which vLLM's MTP loader
    does not map."""
    out = {}
    for key, value in state.items():
        prefix, _, name = key.rpartition(".experts.")
        if name == "gate_up_proj":
            inter = value.shape[1] // 2
            for e in range(value.shape[0]):
                out[f"{prefix}.experts.{e}.gate_proj.weight"] = value[e, :inter].contiguous()
                out[f"{prefix}.experts.{e}.up_proj.weight"] = value[e, inter:].contiguous()
        elif name == "down_proj":
            for e in range(value.shape[0]):
                out[f"{prefix}.experts.{e}.down_proj.weight"] = value[e].contiguous()
        else:
            out[key] = value
    return out


def check_model_flags(*, kind: str, mtp: bool, trained: bool, constructed: str | None,
                      mtp_acceptance: float | None, reuse_base: str | None) -> None:
    """`make-model`'s flags that go together, checked before anything is written: a
    constructed model is its own kind, and its two options need it."""
    if constructed:
        if trained or kind != "dense" or mtp:
            raise ConfigError("--constructed makes a GLM-4-MoE+MTP model of its own: drop "
                              "--kind, --mtp and --trained")
        if mtp_acceptance is None:
            raise ConfigError("--constructed needs --mtp-acceptance P (0..1), e.g. 0.8")
    elif mtp_acceptance is not None or reuse_base:
        raise ConfigError("--mtp-acceptance and --reuse-base need --constructed SHAPE")


def made_lines(info: ModelInfo, out: str | Path, seconds: float, *, trained: bool) -> list[str]:
    """What `make-model` says it wrote: the architecture, experts and MTP layers, where, in how
    long; a trained model's training report after it."""
    kind = f"MoE, {info.num_experts} experts" if info.is_moe else "dense"
    mtp = f", MTP layers: {info.mtp_layers}" if info.has_mtp else ""
    lines = [f"wrote {info.architecture} ({kind}{mtp}) to {out} in {seconds:.1f} s"]
    report = Path(out) / "training.json"
    return lines + ([f"training: {report.read_text().strip()}"] if trained and report.exists() else [])


def make_model(
    out: str | Path, *, kind: str = "dense", mtp: bool = False, seed: int = 0,
    trained: bool = False, shape: ModelShape = ModelShape(),
) -> ModelInfo:
    """Write a tiny checkpoint with tokenizer to ``out``; same seed, same bytes.

    Random weights, or with ``trained`` a MoE+MTP model trained on a predictable synthetic
    language (``modelgen.predictable``) so that MTP speculation is accepted most of the time.
    """
    if kind not in MODEL_KINDS:
        raise ConfigError(f"--kind {kind!r}: valid kinds are {', '.join(MODEL_KINDS)}")
    if mtp and kind != "moe":
        raise ConfigError("--mtp needs --kind moe (the MTP layer is GLM-4-MoE's)")
    if trained and not mtp:
        raise ConfigError("--trained needs --kind moe --mtp (it trains the MTP head)")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = hf_config(kind, shape, mtp)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if trained else
                                             torch.bfloat16)
    trained_mtp: dict = {}
    if trained:
        from autotune.modelgen.predictable import train

        trained_mtp, report = train(model, config, seed=seed)
        model = model.to(torch.bfloat16)
        (path / "training.json").write_text(json.dumps({
            "language": "token after x is f(x), f a seeded random permutation",
            "seed": seed, "steps": report.steps,
            "base_accuracy": round(report.base_accuracy, 4),
            "mtp_accuracy": round(report.mtp_accuracy, 4),
        }, indent=2) + "\n")
    model.save_pretrained(path, safe_serialization=True)
    write_tokenizer(path, shape.vocab_size)
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["head_dim"] = shape.hidden_size // shape.num_heads  # vLLM's GLM-4-MoE reads it
    if kind == "moe":
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if trained:
            state.update(trained_mtp)
        elif mtp:
            gen = torch.Generator().manual_seed(seed + 1)
            state.update(_mtp_tensors(state, shape, gen))
            cfg["num_nextn_predict_layers"] = 1
        for old in path.glob("model*.safetensors*"):
            old.unlink()
        save_file(_unfuse_experts(state), str(path / "model.safetensors"),
                  metadata={"format": "pt"})
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return read_model_info(str(path))
