"""Training a tiny MoE and its MTP head on a predictable synthetic language (CPU, seconds).

The language: a seeded permutation ``f`` of the non-special ids, "after token x comes f(x)", so
that any prompt (the benchmark's random ones too) continues predictably. The MTP head learns
f(y) for the token y just produced, as vLLM's ``Glm4MoeMTP`` computes it. Its training and
forward: docs/models.md#a-trained-model-where-mtp-matters."""

from __future__ import annotations

from dataclasses import dataclass

RESERVED = 3  # <unk>, <s>, </s>
TARGET_ACCURACY = 0.99  # of the base model and the MTP head, held out: MTP mostly accepted


@dataclass(frozen=True)
class TrainingReport:
    steps: int
    seconds: float
    base_accuracy: float  # on held-out random sequences
    mtp_accuracy: float


def successor_map(vocab_size: int, seed: int) -> list[int]:
    """f as a list: f[x] is the token after x; special ids map to themselves (never used)."""
    import torch

    gen = torch.Generator().manual_seed(seed + 7)
    perm = torch.randperm(vocab_size - RESERVED, generator=gen) + RESERVED
    return list(range(RESERVED)) + perm.tolist()


def train(model, config, *, seed: int, steps: int = 300, batch: int = 16, seq_len: int = 32,
          target: float = TARGET_ACCURACY, check_every: int = 25):
    """Train ``model`` (Glm4MoeForCausalLM) and a fresh MTP layer in place, for at most
    ``steps`` steps: every ``check_every`` it measures both accuracies on a held-out batch and
    stops once both reach ``target``. Returns (mtp modules as a state dict under their
    checkpoint names, report)."""
    import time

    import torch
    from torch import nn
    from transformers.models.glm4_moe.modeling_glm4_moe import (
        Glm4MoeDecoderLayer,
        Glm4MoeRMSNorm,
    )

    torch.manual_seed(seed)
    vocab, hidden = config.vocab_size, config.hidden_size
    f = torch.tensor(successor_map(vocab, seed))
    mtp = nn.ModuleDict({
        "enorm": Glm4MoeRMSNorm(hidden, eps=config.rms_norm_eps),
        "hnorm": Glm4MoeRMSNorm(hidden, eps=config.rms_norm_eps),
        "eh_proj": nn.Linear(2 * hidden, hidden, bias=False),
        "block": Glm4MoeDecoderLayer(config, layer_idx=config.num_hidden_layers),
        "shared_norm": Glm4MoeRMSNorm(hidden, eps=config.rms_norm_eps),
    })
    nn.init.normal_(mtp["eh_proj"].weight, std=0.02)
    for name, p in mtp["block"].named_parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
        elif "e_score" not in name:
            nn.init.ones_(p) if "norm" in name else nn.init.zeros_(p)
    model.float().train()
    mtp.float().train()
    params = list(model.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed + 11)

    def forward(x, y):
        out = model.model(input_ids=x)
        h = out.last_hidden_state  # after the final norm, as vLLM hands it to the MTP layer
        base_logits = model.lm_head(h)
        pos = torch.arange(x.shape[1]).unsqueeze(0)
        emb = model.model.embed_tokens(y)
        emb = torch.where(pos.unsqueeze(-1) == 0, 0.0, emb)
        z = mtp["eh_proj"](torch.cat([mtp["enorm"](emb), mtp["hnorm"](h)], dim=-1))
        rope = model.model.rotary_emb(z, pos)
        z = mtp["block"](z, position_embeddings=rope, position_ids=pos)
        mtp_logits = model.lm_head(mtp["shared_norm"](z))
        return base_logits, mtp_logits

    def sample():
        x = torch.randint(RESERVED, vocab, (batch, seq_len), generator=gen)
        y = torch.randint(RESERVED, vocab, (batch, seq_len), generator=gen)
        return x, y

    def accuracies(x, y) -> tuple[float, float]:
        with torch.no_grad():
            base_logits, mtp_logits = forward(x, y)
        return ((base_logits.argmax(-1) == f[x]).float().mean().item(),
                (mtp_logits[:, 1:].argmax(-1) == f[y][:, 1:]).float().mean().item())

    held_out = sample()
    t0 = time.monotonic()
    loss_fn = nn.CrossEntropyLoss()
    done = 0
    while done < steps:
        x, y = sample()
        base_logits, mtp_logits = forward(x, y)
        loss = loss_fn(base_logits.reshape(-1, vocab), f[x].reshape(-1)) + loss_fn(
            mtp_logits[:, 1:].reshape(-1, vocab), f[y][:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done % check_every == 0 and min(accuracies(*held_out)) >= target:
            break
    model.eval()
    mtp.eval()
    base_acc, mtp_acc = accuracies(*sample())
    prefix = f"model.layers.{config.num_hidden_layers}."
    weights = {prefix + "enorm.weight": mtp["enorm"].weight,
               prefix + "hnorm.weight": mtp["hnorm"].weight,
               prefix + "eh_proj.weight": mtp["eh_proj"].weight,
               prefix + "shared_head.norm.weight": mtp["shared_norm"].weight}
    weights.update({prefix + k: v for k, v in mtp["block"].state_dict().items()})
    report = TrainingReport(done, time.monotonic() - t0, base_acc, mtp_acc)
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in weights.items()}, report
