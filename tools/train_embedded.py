#!/usr/bin/env python3
"""Train the embedded model: the Cosmos-Predict2 DiT (docs/architecture.md sections 1-4) on 16x16 digits.

Training-time only (torch CPU, run via bin/train from .venv-train); the runtime never imports torch.

  bin/train --check-only          # prove the torch network reproduces the public reference (tiny)
  bin/train --steps 800           # check, train, save EMA weights, evaluate with an SVC

Outputs (in --out, default models/embedded): dit.safetensors (exactly expected_shapes(cfg), float32)
and prompt_encoder.safetensors (the two PROMPT_KEYS). Both are rewritten atomically every
--ckpt-every steps, so a killed run leaves the last checkpoint intact.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.model.config import ModelConfig, load_model_dir, load_profile  # noqa: E402
from harness.model.embedded import DIGIT_WORDS, PROMPT_KEYS, digits_latents, tokenize  # noqa: E402
from harness.model.weights import expected_shapes, save_weights  # noqa: E402

REFERENCE = ROOT / "tests" / "data" / "cosmos-reference"   # tensors from the public Cosmos-Predict2 code
CHECK_TOLERANCE = 1e-4

TEMPLATES = ("{w}", "digit {w}", "the digit {w}", "a handwritten {w}", "a handwritten digit {w}",
             "the number {w}", "a picture of the number {w}", "a drawing of a {w}")
EVAL_PROMPT = "a handwritten digit {w}"


# ----------------------------------------------------------------------------------------------
# The network (own implementation of docs/architecture.md sections 1-3; module names = public keys)
# ----------------------------------------------------------------------------------------------

def _linear(n_in: int, n_out: int) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TimestepMLP(nn.Module):
    """t_embedder.1: linear_1 -> SiLU -> linear_2, giving the 3D adaln_lora vector."""

    def __init__(self, d: int):
        super().__init__()
        self.linear_1 = _linear(d, d)
        self.linear_2 = _linear(d, 3 * d)

    def forward(self, sin):
        return self.linear_2(F.silu(self.linear_1(sin)))


class Attention(nn.Module):
    def __init__(self, d: int, kv_dim: int, heads: int, eps: float):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.q_proj, self.k_proj = _linear(d, d), _linear(kv_dim, d)
        self.v_proj, self.output_proj = _linear(kv_dim, d), _linear(d, d)
        self.q_norm, self.k_norm = RMSNorm(self.head_dim, eps), RMSNorm(self.head_dim, eps)

    def forward(self, x, kv, rope=None):
        b, n, _ = x.shape
        m = kv.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, n, self.heads, self.head_dim))
        k = self.k_norm(self.k_proj(kv).view(b, m, self.heads, self.head_dim))
        v = self.v_proj(kv).view(b, m, self.heads, self.head_dim)
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.output_proj(out.transpose(1, 2).reshape(b, n, -1))


class MLP(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.layer1, self.layer2 = _linear(d, hidden), _linear(hidden, d)

    def forward(self, x):
        return self.layer2(F.gelu(self.layer1(x)))   # exact erf GELU


def _modulation(d: int, r: int, n: int) -> nn.Sequential:
    return nn.Sequential(nn.SiLU(), _linear(d, r), _linear(r, n * d))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, r, eps = cfg.width, cfg.adaln_lora_rank, cfg.norm_eps
        self.eps = eps
        self.self_attn = Attention(d, d, cfg.heads, eps)
        self.cross_attn = Attention(d, cfg.text_emb_dim, cfg.heads, eps)
        self.mlp = MLP(d, cfg.ffn_hidden)
        self.adaln_modulation_self_attn = _modulation(d, r, 3)
        self.adaln_modulation_cross_attn = _modulation(d, r, 3)
        self.adaln_modulation_mlp = _modulation(d, r, 3)

    def _mod(self, seq, emb, lora):
        shift, scale, gate = (seq(emb) + lora).chunk(3, dim=-1)
        return shift[:, None], scale[:, None], gate[:, None]

    def _norm(self, x, shift, scale):
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * (1 + scale) + shift

    def forward(self, x, emb, lora, text_emb, rope):
        shift, scale, gate = self._mod(self.adaln_modulation_self_attn, emb, lora)
        h = self._norm(x, shift, scale)
        x = x + gate * self.self_attn(h, h, rope)
        shift, scale, gate = self._mod(self.adaln_modulation_cross_attn, emb, lora)
        x = x + gate * self.cross_attn(self._norm(x, shift, scale), text_emb)
        shift, scale, gate = self._mod(self.adaln_modulation_mlp, emb, lora)
        return x + gate * self.mlp(self._norm(x, shift, scale))


class FinalLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.width
        self.eps = cfg.norm_eps
        self.adaln_modulation = _modulation(d, cfg.adaln_lora_rank, 2)
        self.linear = _linear(d, cfg.out_features)

    def forward(self, x, emb, lora):
        d = x.shape[-1]
        shift, scale = (self.adaln_modulation(emb) + lora[:, :2 * d]).chunk(2, dim=-1)
        h = F.layer_norm(x, x.shape[-1:], eps=self.eps) * (1 + scale[:, None]) + shift[:, None]
        return self.linear(h)


def rope_angles(cfg: ModelConfig, t: int, h: int, w: int) -> torch.Tensor:
    """[t*h*w, head_dim/2] angles, slots ordered [t, h, w] (docs/architecture.md section 3)."""
    dim_t, dim_h, dim_w = cfg.rope_dims

    def freqs(dim, ratio):
        theta = 10000.0 * ratio ** (dim / (dim - 2))
        return 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)

    ft, fh, fw = freqs(dim_t, cfg.rope_ratio_t), freqs(dim_h, cfg.rope_ratio_h), freqs(dim_w, cfg.rope_ratio_w)
    pt, ph, pw = torch.meshgrid(torch.arange(t, dtype=torch.float64), torch.arange(h, dtype=torch.float64),
                                torch.arange(w, dtype=torch.float64), indexing="ij")
    ang = torch.cat([pt.reshape(-1, 1) * ft, ph.reshape(-1, 1) * fh, pw.reshape(-1, 1) * fw], dim=-1)
    return ang


def apply_rope(x, rope):
    """x [B, N, heads, Dh]; rope = (cos, sin) each [N, 1, Dh/2]; split-half rotation."""
    cos, sin = rope
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class CosmosDiT(nn.Module):
    """MiniTrainDIT forward for image latents [B, C, H, W] (T = 1); timesteps are the raw network input."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.patch_temporal != 1:
            raise ValueError("this implementation handles images (patch_temporal 1)")
        self.cfg = cfg
        d = cfg.width
        self.x_embedder = nn.Module()
        self.x_embedder.proj = nn.Sequential(nn.Identity(), _linear(cfg.patch_features, d))
        self.t_embedder = nn.Sequential(nn.Identity(), TimestepMLP(d))
        self.t_embedding_norm = RMSNorm(d, cfg.norm_eps)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.blocks))
        self.final_layer = FinalLayer(cfg)
        self._rope_cache: dict = {}

    def sinusoid(self, t):
        half = self.cfg.width // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        arg = t.float()[:, None] * freqs[None]
        return torch.cat([torch.cos(arg), torch.sin(arg)], dim=-1)   # cos first

    def rope(self, hp, wp, dtype):
        key = (hp, wp, dtype)
        if key not in self._rope_cache:
            ang = rope_angles(self.cfg, 1, hp, wp)[:, None, :]
            self._rope_cache[key] = (torch.cos(ang).to(dtype), torch.sin(ang).to(dtype))
        return self._rope_cache[key]

    def patchify(self, x):
        b, c, h, w = x.shape
        p = self.cfg.patch_spatial
        if self.cfg.padding_mask:
            x = torch.cat([x, torch.zeros(b, 1, h, w, dtype=x.dtype)], dim=1)   # mask channel LAST
            c += 1
        # b c (h i) (w j) -> b (h w) (c i j): channel-major features
        x = x.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // p) * (w // p), c * p * p)

    def unpatchify(self, y, h, w):
        b = y.shape[0]
        p, c = self.cfg.patch_spatial, self.cfg.latent_channels
        # b (h w) (i j c) -> b c (h i) (w j): channel-minor features
        y = y.view(b, h // p, w // p, p, p, c).permute(0, 5, 1, 3, 2, 4)
        return y.reshape(b, c, h, w)

    def forward(self, x, timesteps, text_emb):
        b, _, h, w = x.shape
        p = self.cfg.patch_spatial
        sin = self.sinusoid(timesteps).to(x.dtype)
        lora = self.t_embedder(sin)
        emb = self.t_embedding_norm(sin)   # RMSNorm of the raw sinusoid; SiLU is inside each modulation
        tokens = self.x_embedder.proj(self.patchify(x))
        rope = self.rope(h // p, w // p, x.dtype)
        for block in self.blocks:
            tokens = block(tokens, emb, lora, text_emb, rope)
        return self.unpatchify(self.final_layer(tokens, emb, lora), h, w)


class PromptEncoder(nn.Module):
    def __init__(self, vocab: int, length: int, dim: int):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)
        self.position_embedding = nn.Parameter(torch.zeros(length, dim))
        nn.init.normal_(self.token_embedding.weight, std=0.5)
        nn.init.normal_(self.position_embedding, std=0.5)

    def forward(self, ids):
        return self.token_embedding(ids) + self.position_embedding


# ----------------------------------------------------------------------------------------------
# Check against the public implementation's tensors
# ----------------------------------------------------------------------------------------------

def check_reference(console) -> float:
    from safetensors.numpy import load_file
    cfg = load_profile("cosmos-tiny")
    model = CosmosDiT(cfg)
    tensors = load_file(str(REFERENCE / "tiny.safetensors"))
    own = set(model.state_dict())
    if own != set(tensors) or own != set(expected_shapes(cfg)):
        raise SystemExit(f"check: key mismatch: {sorted(own ^ set(tensors))[:5]}")
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    model.eval()
    io = np.load(REFERENCE / "tiny_io.npz")
    x = torch.from_numpy(io["x"])[:, :, 0]                 # [1, 4, 1, 8, 8] -> [1, 4, 8, 8]
    with torch.no_grad():
        out = model(x, torch.from_numpy(io["timesteps"]), torch.from_numpy(io["text_emb"]))
    ref = io["output"][:, :, 0]
    err = float(np.abs(out.numpy() - ref).max())
    console.print(f"check-only: torch float32 vs public Cosmos-Predict2 (tiny_io.npz output): "
                  f"max abs error {err:.3e} (max |output| {np.abs(ref).max():.3f}, tolerance {CHECK_TOLERANCE:g})")
    return err


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

def prompt_table(cfg: ModelConfig) -> torch.Tensor:
    """[10 digits, 2 * len(TEMPLATES), L] token ids: every template with the word and the numeral."""
    vocab, length = cfg.prompt["vocab"], cfg.text_emb_tokens
    rows = []
    for d, word in enumerate(DIGIT_WORDS):
        rows.append([tokenize(t.format(w=name), vocab, length) for t in TEMPLATES for name in (word, str(d))])
    return torch.from_numpy(np.array(rows))


def init_model(model: CosmosDiT) -> None:
    """adaLN-Zero: zero the per-branch modulation outputs and the final projection."""
    for blk in model.blocks:
        for seq in (blk.adaln_modulation_self_attn, blk.adaln_modulation_cross_attn, blk.adaln_modulation_mlp):
            nn.init.zeros_(seq[2].weight)
    nn.init.zeros_(model.final_layer.adaln_modulation[2].weight)
    nn.init.zeros_(model.final_layer.linear.weight)


def export(model: CosmosDiT, enc: PromptEncoder, cfg: ModelConfig, out: Path, meta: dict) -> None:
    state = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    shapes = expected_shapes(cfg)
    assert set(state) == set(shapes) and all(tuple(state[k].shape) == s for k, s in shapes.items())
    meta = {k: str(v) for k, v in meta.items()}
    save_weights({k: state[k] for k in shapes}, out / cfg.files.get("weights", "dit.safetensors"), meta)
    prompt = {PROMPT_KEYS[0]: enc.token_embedding.weight.detach().numpy().copy(),
              PROMPT_KEYS[1]: enc.position_embedding.detach().numpy().copy()}
    save_weights(prompt, out / cfg.files.get("prompt_encoder", "prompt_encoder.safetensors"), meta)
    for name in (cfg.files.get("weights", "dit.safetensors"),
                 cfg.files.get("prompt_encoder", "prompt_encoder.safetensors")):
        (out / name).chmod(0o644)   # the atomic temp file is created 0600


def train(args, cfg: ModelConfig, console):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    latents, labels = digits_latents()
    data = torch.from_numpy(latents)
    targets = torch.from_numpy(labels)
    table = prompt_table(cfg)
    n_templates = table.shape[1]
    empty = torch.zeros(cfg.text_emb_tokens, dtype=torch.long)

    model, enc = CosmosDiT(cfg), PromptEncoder(len(cfg.prompt["vocab"]), cfg.text_emb_tokens, cfg.text_emb_dim)
    init_model(model)
    prior_steps = 0
    if args.init_from:
        from safetensors import safe_open
        from safetensors.numpy import load_file
        src = Path(args.init_from)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in load_file(str(src / "dit.safetensors")).items()})
        pe = load_file(str(src / "prompt_encoder.safetensors"))
        with torch.no_grad():
            enc.token_embedding.weight.copy_(torch.from_numpy(pe[PROMPT_KEYS[0]]))
            enc.position_embedding.copy_(torch.from_numpy(pe[PROMPT_KEYS[1]]))
        with safe_open(str(src / "dit.safetensors"), "np") as fh:
            prior_steps = int((fh.metadata() or {}).get("total_steps", (fh.metadata() or {}).get("steps", 0)))
        console.print(f"continuing from {src} ({prior_steps} steps already trained)")
    params = list(model.parameters()) + list(enc.parameters())
    console.print(f"model: {sum(p.numel() for p in model.parameters()):,} DiT parameters + "
                  f"{sum(p.numel() for p in enc.parameters()):,} prompt-encoder parameters; "
                  f"{args.steps} steps x batch {args.batch}, seed {args.seed}")
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    warmup = min(20, max(1, args.steps // 20))

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return args.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))

    ema_model, ema_enc = CosmosDiT(cfg), PromptEncoder(len(cfg.prompt["vocab"]), cfg.text_emb_tokens, cfg.text_emb_dim)
    ema_model.load_state_dict(model.state_dict())
    ema_enc.load_state_dict(enc.state_dict())
    ema_params = list(ema_model.parameters()) + list(ema_enc.parameters())
    for p in ema_params:
        p.requires_grad_(False)

    t0 = time.time()
    smooth, recent = None, []
    meta = {}
    columns = (TextColumn("train"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("train", total=args.steps, loss="-")
        for step in range(args.steps):
            idx = torch.from_numpy(rng.integers(0, len(data), args.batch))
            x0, y = data[idx], targets[idx]
            ids = table[y, torch.from_numpy(rng.integers(0, n_templates, args.batch))]
            drop = torch.from_numpy(rng.random(args.batch) < 0.1)
            ids = torch.where(drop[:, None], empty[None], ids)
            noise = torch.from_numpy(rng.standard_normal(x0.shape).astype(np.float32))
            sigma = torch.sigmoid(torch.from_numpy(rng.standard_normal(args.batch).astype(np.float32)))
            s = sigma[:, None, None, None]
            xs = s * noise + (1 - s) * x0
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            v = model(xs, sigma * cfg.timestep_multiplier, enc(ids))
            loss = F.mse_loss(v, noise - x0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            decay = min(args.ema, (1 + step) / (10 + step))
            with torch.no_grad():
                torch._foreach_lerp_(ema_params, [p.detach() for p in params], 1 - decay)
            lv = loss.item()
            recent = (recent + [lv])[-50:]
            smooth = lv if smooth is None else 0.98 * smooth + 0.02 * lv
            progress.update(task, advance=1, loss=f"{smooth:.4f}")
            done = step + 1
            if done % args.log_every == 0 or done == args.steps:
                el = time.time() - t0
                console.print(f"step {done}/{args.steps}  loss {lv:.4f}  mean50 {np.mean(recent):.4f}  "
                              f"lr {lr_at(step):.2e}  {el:.0f}s  ({el / done:.2f} s/step)", highlight=False)
            if done % args.ckpt_every == 0 or done == args.steps:
                meta = {"steps": done, "total_steps": prior_steps + done, "seed": args.seed, "batch": args.batch,
                        "loss": f"{np.mean(recent):.5f}", "ema": args.ema, "wall_seconds": f"{time.time() - t0:.0f}"}
                export(ema_model, ema_enc, cfg, args.out, meta)
    wall = time.time() - t0
    console.print(f"trained {args.steps} steps in {wall:.0f} s ({wall / args.steps:.2f} s/step); "
                  f"final loss (mean of last 50) {np.mean(recent):.4f}; EMA weights saved to {args.out}")
    return ema_model, ema_enc, wall, float(np.mean(recent))


# ----------------------------------------------------------------------------------------------
# Sampling and evaluation
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def sample(model, enc, cfg, ids, cfg_scale, seed, steps=None, shift=None):
    steps = steps or int(cfg.sampler.get("steps", 20))
    shift = shift or float(cfg.sampler.get("shift", 3.0))
    n = ids.shape[0]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cfg.latent_channels, *cfg.latent_size, generator=g)
    cond = enc(ids)
    uncond = enc(torch.zeros_like(ids))
    sig = [shift * s / (1 + (shift - 1) * s) for s in (1 - i / steps for i in range(steps + 1))]
    for i in range(steps):
        t = torch.full((n,), sig[i] * cfg.timestep_multiplier)
        if cfg_scale == 1.0:
            v = model(x, t, cond)
        else:
            both = model(torch.cat([x, x]), torch.cat([t, t]), torch.cat([cond, uncond]))
            v_c, v_u = both[:n], both[n:]
            v = v_u + cfg_scale * (v_c - v_u)
        x = x + (sig[i + 1] - sig[i]) * v
    return x


def digit_classifier():
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC
    d = load_digits()
    return SVC(gamma=0.001).fit(d.data, d.target)


def to_8x8(lat: np.ndarray) -> np.ndarray:
    pooled = lat.reshape(-1, 8, 2, 8, 2).mean(axis=(2, 4))
    return np.clip((pooled + 1.0) * 8.0, 0.0, 16.0).reshape(len(lat), 64)


def evaluate(model, enc, cfg, console, per_digit=10):
    model.eval()
    clf = digit_classifier()
    latents, labels = digits_latents()
    real_acc = float((clf.predict(to_8x8(latents[:, 0])) == labels).mean())
    ids = torch.from_numpy(np.array([tokenize(EVAL_PROMPT.format(w=w), cfg.prompt["vocab"], cfg.text_emb_tokens)
                                     for w in DIGIT_WORDS for _ in range(per_digit)]))
    want = np.repeat(np.arange(10), per_digit)
    seed = int(cfg.sampler.get("seed", 0))
    results = {}
    for scale in (4.0, 1.0):
        t = time.time()
        x = sample(model, enc, cfg, ids, scale, seed).numpy()[:, 0]
        pred = clf.predict(to_8x8(x))
        acc = float((pred == want).mean())
        per = [int((pred[want == d] == d).sum()) for d in range(10)]
        results[scale] = (acc, per, x)
        console.print(f"eval CFG {scale:g}: accuracy {acc * 100:.1f} % ({len(want)} samples, seed {seed}); "
                      f"per digit {per}; range [{x.min():.2f}, {x.max():.2f}]; {time.time() - t:.1f} s",
                      highlight=False)
    console.print(f"(classifier sanity: SVC on pooled training latents {real_acc * 100:.1f} %)")
    return results, real_acc


def ascii_digits(x: np.ndarray) -> str:
    chars = " .:-=+*#%@"
    rows = []
    for r in range(16):
        line = []
        for img in x:
            line.append("".join(chars[int(np.clip((v + 1) / 2, 0, 0.999) * len(chars))] for v in img[r]))
        rows.append(" ".join(line))
    return "\n".join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "embedded")
    ap.add_argument("--check-only", action="store_true", help="only verify the network against the reference")
    ap.add_argument("--eval-only", action="store_true", help="evaluate the weights already in --out")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--init-from", type=Path, default=None,
                    help="start from the weights in this model dir (continue training) instead of adaLN-Zero init")
    ap.add_argument("--ema", type=float, default=0.995)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads (1 is steadier when other processes load the 2 cores)")
    args = ap.parse_args(argv)
    from rich.console import Console
    console = Console()
    torch.set_num_threads(args.threads)

    err = check_reference(console)
    if not err < CHECK_TOLERANCE:
        console.print(f"[red]FAILED: reference check error {err:.3e} >= {CHECK_TOLERANCE:g}; not training[/red]")
        return 1
    if args.check_only:
        return 0
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    args.out = out
    cfg = load_model_dir(out if (out / "model.toml").exists() else ROOT / "models" / "embedded")
    if args.eval_only:
        from safetensors.numpy import load_file
        model = CosmosDiT(cfg)
        enc = PromptEncoder(len(cfg.prompt["vocab"]), cfg.text_emb_tokens, cfg.text_emb_dim)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in load_file(str(out / "dit.safetensors")).items()})
        pe = load_file(str(out / "prompt_encoder.safetensors"))
        enc.token_embedding.weight.data = torch.from_numpy(pe[PROMPT_KEYS[0]])
        enc.position_embedding.data = torch.from_numpy(pe[PROMPT_KEYS[1]])
    else:
        model, enc, _, _ = train(args, cfg, console)
    results, _ = evaluate(model, enc, cfg, console)
    console.print("CFG 4, first sample of each digit:")
    x4 = results[4.0][2]
    print(ascii_digits(x4[::10]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
