#!/usr/bin/env python3
"""Trains doppler's default model: a small Llama and a byte-level BPE tokenizer, on the King James
Bible (public domain, Debian's bible-kjv-text; default_model/prepare_corpus.sh writes the text).

Writes an HF model directory (config.json, model.safetensors in f32, tokenizer.json,
tokenizer_config.json) and the reference outputs doppler's tests compare against:
  reference.json  held-out perplexity (measured as `doppler perplexity` does), greedy outputs
  heldout.txt     the held-out sample the perplexity test scores (the first held-out chapters,
                  at least --heldout-bytes: Genesis 50)
  test.txt        every held-out chapter (for the model card's figures)

Chapters are split by their index i in the Bible (0 = Genesis 1): i % 50 == 49 is held out (test),
i % 50 == 24 is the validation set that picks the checkpoint, the rest is trained on.

usage: train.py --corpus .train/kjv.txt --out DIR [--steps N] [--tiny]   (--help: every option)
  --tiny: a tiny model, a few steps on the CPU, to check the pipeline end to end. Without the
          `tokenizers` package, the tokenizer is then bytes only (no merges).
"""
import argparse
import contextlib
import copy
import json
import math
import os
import random
import re
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PROMPTS = ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd"]
BOS, EOS = "<s>", "</s>"


def log(*args):
    print(*args, flush=True)


# ----------------------------------------------------------------------------------------------
# Corpus


def read_chapters(path):
    """[(book, chapter, [verse texts])] from the reader's output (prepare_corpus.sh)."""
    heading = re.compile(r"^(\S.*) (\d+)$")
    verse = re.compile(r"^ +(\d+) (.*)$")
    chapters = []
    with open(path, encoding="ascii") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            m = verse.match(line)
            if m:
                if not chapters or int(m.group(1)) != len(chapters[-1][2]) + 1:
                    raise ValueError(f"{path}: verse out of order: {line[:60]!r}")
                chapters[-1][2].append(m.group(2).strip())
                continue
            m = heading.match(line)
            if m:
                chapters.append((m.group(1), int(m.group(2)), []))
                continue
            raise ValueError(f"{path}: unexpected line {line[:60]!r}")
    return chapters


def chapter_text(chapter):
    return "\n".join(chapter[2]) + "\n"


# ----------------------------------------------------------------------------------------------
# Tokenizer


def train_tokenizer(texts, vocab_size, out_dir, tiny):
    """Trains a byte-level BPE (GPT-2 pre-tokenizer), saves tokenizer.json; returns (encode, decode)."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    except ImportError:
        if not tiny:
            raise
        return bytes_only_tokenizer(out_dir)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.token_to_id(BOS) == 0 and tok.token_to_id(EOS) == 1
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, 0)])
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    encode = lambda text: tok.encode(text, add_special_tokens=False).ids
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)
    return encode, decode, tok.get_vocab_size()


def byte_chars():
    """GPT-2's byte -> printable character map (byte-level BPE's alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def bytes_only_tokenizer(out_dir):
    """A byte-level tokenizer.json with no merges (for --tiny without the tokenizers package)."""
    chars = byte_chars()
    vocab = {BOS: 0, EOS: 1}
    for b in range(256):
        vocab[chars[b]] = 2 + b
    special = lambda i, t: {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(0, BOS), special(1, EOS)],
        "normalizer": None, "pre_tokenizer": byte_level,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": BOS, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS: {"id": BOS, "ids": [0], "tokens": [BOS]}},
        },
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    encode = lambda text: [2 + b for b in text.encode("utf-8")]
    decode = lambda ids: bytes(i - 2 for i in ids if i >= 2).decode("utf-8", "replace")
    return encode, decode, len(vocab)


# ----------------------------------------------------------------------------------------------
# Model: Llama (RMSNorm, rotate-half RoPE, GQA, SiLU-gated MLP, tied embeddings), HF's tensor names.


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d = c["hidden_size"]
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=False)

    def forward(self, x, cos, sin, exact, kv_f16):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if kv_f16:  # as an f16 KV cache stores them
            k, v = k.half().float(), v.half().float()
        rep = self.heads // self.kv_heads  # query head h reads KV head h // rep
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if exact or not hasattr(F, "scaled_dot_product_attention"):
            scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v.float()
            y = y.to(q.dtype)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = Mlp(c)

    def forward(self, x, cos, sin, dropout, exact, kv_f16):
        x = x + F.dropout(self.self_attn(self.input_layernorm(x), cos, sin, exact, kv_f16), dropout, self.training)
        return x + F.dropout(self.mlp(self.post_attention_layernorm(x)), dropout, self.training)


class Llama(nn.Module):
    def __init__(self, c, dropout=0.0):
        super().__init__()
        self.c, self.dropout = c, dropout
        self.model = nn.Module()  # HF's names: model.embed_tokens, model.layers.N..., model.norm
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.model.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.model.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        hd = c["head_dim"]
        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        freqs = torch.outer(torch.arange(c["max_position_embeddings"]).float(), inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                scale = 1.0 / math.sqrt(2 * c["num_hidden_layers"]) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                nn.init.normal_(p, mean=0.0, std=std * scale)

    def forward(self, ids, exact=False, kv_f16=False):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, self.dropout, exact, kv_f16)
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)  # tied LM head


def save_safetensors(state, path):
    """f32 tensors in safetensors format (the safetensors package when present)."""
    state = {k: v.detach().float().contiguous().cpu() for k, v in state.items()}
    try:
        from safetensors.torch import save_file
        save_file(state, path, metadata={"format": "pt"})
        return
    except ImportError:
        pass
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(state):
        data = state[name].numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(state[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for data in blobs:
            f.write(data)


# ----------------------------------------------------------------------------------------------
# Evaluation, as doppler measures it


@torch.no_grad()
def window_perplexity(model, ids, ctx, bos, device, batch=64):
    """runtime/perplexity.cc: windows of ctx tokens, first token replaced by BOS, each token of the
    second half predicted (positions ctx/2 .. ctx-2 predict the next token); float32, float64 sums."""
    model.eval()
    windows = len(ids) // ctx
    if windows == 0:
        raise ValueError(f"{len(ids)} tokens: fewer than one window of {ctx}")
    data = torch.tensor(ids[: windows * ctx], dtype=torch.long).view(windows, ctx)
    data[:, 0] = bos
    nlls = []
    for i in range(0, windows, batch):
        x = data[i:i + batch].to(device)
        logits = model(x, exact=True).double()
        lp = logits[:, ctx // 2: ctx - 1].log_softmax(-1)
        nlls.append(-lp.gather(-1, x[:, ctx // 2 + 1:, None]).squeeze(-1).flatten().cpu())
    nll = torch.cat(nlls)
    mean = nll.mean().item()
    var = max(0.0, (nll * nll).mean().item() - mean * mean)
    ppl = math.exp(mean)
    return {"perplexity": ppl, "stderr": ppl * math.sqrt(var / len(nll)), "mean_nll": mean,
            "scored_tokens": len(nll), "windows": windows}


@torch.no_grad()
def greedy(model, prompt_ids, n, device):
    """n greedy tokens, recomputing the whole sequence each step in float32, K/V rounded to f16."""
    model.eval()
    ids, margins = list(prompt_ids), []
    for _ in range(n):
        logits = model(torch.tensor([ids], device=device), exact=True, kv_f16=True)[0, -1].double()
        top = logits.topk(2)
        margins.append((top.values[0] - top.values[1]).item())
        ids.append(int(top.indices[0]))
    return ids[len(prompt_ids):], min(margins)


def f16_matrices(model):
    """A copy whose matrices (the GGUF's F16 tensors) are rounded to f16; vectors stay f32."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.copy_(p.half().float())
    return m


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, help="default: 900 (--tiny: 20)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--dropout", type=float, default=0.15)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--time-limit", type=float, default=240, help="stop training after this many seconds")
    ap.add_argument("--heldout-bytes", type=int, default=3000, help="size of heldout.txt (whole chapters)")
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    t_start = time.time()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":  # the references are float32: no TF32 anywhere
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    log(f"torch {torch.__version__} on {device}" + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))

    # Corpus and splits.
    chapters = read_chapters(args.corpus)
    verses = sum(len(c[2]) for c in chapters)
    log(f"{len(chapters)} chapters, {verses} verses")
    if not args.tiny:
        assert len(chapters) == 1189 and verses == 31102, "not the whole KJV"
    split = lambda i: "test" if i % 50 == 49 else "valid" if i % 50 == 24 else "train"
    texts = {"train": [], "valid": [], "test": []}
    for i, c in enumerate(chapters):
        texts[split(i)].append(chapter_text(c))
    if args.tiny:
        texts = {k: v[: max(2, len(v) // 20)] for k, v in texts.items()}
    joined = {k: "\n".join(v) for k, v in texts.items()}
    heldout = []
    for t in texts["test"]:
        heldout.append(t)
        if len("\n".join(heldout)) >= args.heldout_bytes:
            break
    heldout_text = "\n".join(heldout)
    for name, text in [("heldout.txt", heldout_text), ("test.txt", joined["test"])]:
        with open(os.path.join(args.out, name), "w", encoding="ascii", newline="\n") as f:
            f.write(text)
    log({k: f"{len(v)} chapters, {len(joined[k])} bytes" for k, v in texts.items()})
    log(f"heldout.txt: {len(heldout)} chapters, {len(heldout_text)} bytes")

    # Tokenizer, trained on the training chapters only.
    t0 = time.time()
    encode, decode, vocab_in_tokenizer = train_tokenizer(texts["train"], 4096, args.out, args.tiny)
    ids = {k: encode(v) for k, v in joined.items()}
    log(f"tokenizer: {vocab_in_tokenizer} tokens ({time.time() - t0:.1f} s); "
        + ", ".join(f"{k} {len(v)} tokens ({len(joined[k]) / len(v):.2f} bytes/token)" for k, v in ids.items()))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
                   "add_bos_token": True, "add_eos_token": False, "model_max_length": 256,
                   "clean_up_tokenization_spaces": False}, f, indent=2)

    # Model.
    if args.tiny:
        c = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=64)
    else:
        c = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=5, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=32, max_position_embeddings=256)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_in_tokenizer, **c,
              "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
              "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "tie_word_embeddings": True,
              "bos_token_id": 0, "eos_token_id": 1, "initializer_range": 0.02, "use_cache": True,
              "torch_dtype": "float32"}
    ctx = config["max_position_embeddings"]
    model = Llama(config, dropout=args.dropout).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params} parameters, config {json.dumps(c)}")

    # Training: windows of ctx+1 tokens at random offsets of the training stream, the first token
    # replaced by BOS (as generation and doppler's perplexity start).
    train_ids = torch.tensor(ids["train"], dtype=torch.long)
    gen = torch.Generator().manual_seed(args.seed)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=device == "cuda")
    except TypeError:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
    steps = args.steps or (20 if args.tiny else 900)
    eval_every = 10 if args.tiny else args.eval_every
    amp = device == "cuda"

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    best = {"loss": float("inf"), "step": -1, "state": None}
    history = []
    t_train = time.time()
    ema, done = None, 0
    for step in range(steps):
        starts = torch.randint(0, len(train_ids) - ctx - 1, (args.batch,), generator=gen)
        batch = torch.stack([train_ids[s:s + ctx + 1] for s in starts.tolist()])
        batch[:, 0] = 0
        batch = batch.to(device, non_blocking=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        model.train()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16) if amp else contextlib.nullcontext():
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        last = done == steps or time.time() - t_train > args.time_limit
        if done % eval_every == 0 or last:
            v = window_perplexity(model, ids["valid"], ctx, 0, device)
            history.append({"step": done, "train_loss": round(ema, 4), "valid_loss": round(v["mean_nll"], 4)})
            mark = ""
            if v["mean_nll"] < best["loss"]:
                best = {"loss": v["mean_nll"], "step": done,
                        "state": {k: t.detach().clone() for k, t in model.state_dict().items()}}
                mark = " *"
            log(f"step {done}/{steps} lr {lr_at(step):.2e} train {ema:.4f} valid {v['mean_nll']:.4f} "
                f"({time.time() - t_train:.0f} s){mark}")
        if last:
            break
    train_seconds = time.time() - t_train
    log(f"trained {done} steps in {train_seconds:.1f} s; best valid loss {best['loss']:.4f} at step {best['step']}")
    model.load_state_dict(best["state"])
    model.dropout = 0.0
    model.eval()

    # The HF directory.
    state = {k: v.float() for k, v in model.state_dict().items()}
    save_safetensors(state, os.path.join(args.out, "model.safetensors"))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    # References.
    heldout_ids = encode(heldout_text)
    ref = {"ctx": ctx, "bos_id": 0, "parameters": n_params, "config": c,
           "training": {"steps": done, "batch": args.batch, "lr": args.lr, "dropout": args.dropout,
                        "weight_decay": args.weight_decay, "seed": args.seed, "best_step": best["step"],
                        "train_seconds": round(train_seconds, 1), "device": torch.cuda.get_device_name() if amp else "cpu",
                        "torch": torch.__version__, "history": history},
           "tokens": {k: len(v) for k, v in ids.items()},
           "heldout_file": "heldout.txt", "heldout_ids": heldout_ids, "perplexity": {}, "greedy": []}
    model16 = f16_matrices(model)
    for name, toks in [("heldout.txt", heldout_ids), ("test", ids["test"]), ("valid", ids["valid"])]:
        if len(toks) < ctx:
            continue
        r = {"f32": window_perplexity(model, toks, ctx, 0, device),
             "f16_matrices": window_perplexity(model16, toks, ctx, 0, device)}
        ref["perplexity"][name] = r
        log(f"perplexity {name}: f32 {r['f32']['perplexity']:.4f} (loss {r['f32']['mean_nll']:.4f}, "
            f"{r['f32']['scored_tokens']} tokens), f16 matrices {r['f16_matrices']['perplexity']:.4f}")
    n_greedy = 16 if args.tiny else 64
    for prompt in PROMPTS:
        prompt_ids = [0] + encode(prompt)
        out, margin = greedy(model16, prompt_ids, n_greedy, device)
        ref["greedy"].append({"prompt": prompt, "prompt_ids": prompt_ids, "ids": out, "min_top2_margin": margin,
                              "text": decode(out)})
        log(f"greedy {prompt!r} -> {decode(out)!r} (min top-2 margin {margin:.4f})")

    # Cross-check the checkpoint with transformers' own Llama, when it is installed.
    try:
        import transformers
        from transformers import AutoTokenizer, LlamaForCausalLM
        try:
            hf = LlamaForCausalLM.from_pretrained(args.out, dtype=torch.float32)
        except TypeError:
            hf = LlamaForCausalLM.from_pretrained(args.out, torch_dtype=torch.float32)
        hf = hf.to(device).eval()
        x = torch.tensor([[0] + heldout_ids[1:ctx]], device=device)
        with torch.no_grad():
            diff = (hf(x).logits.float() - model(x, exact=True).float()).abs().max().item()
        hf_tok = AutoTokenizer.from_pretrained(args.out)
        same_ids = hf_tok(PROMPTS[0])["input_ids"] == ref["greedy"][0]["prompt_ids"]
        ref["transformers_check"] = {"version": transformers.__version__, "max_abs_logit_diff": diff,
                                     "tokenizer_prompt_ids_match": same_ids}
        log(f"transformers {transformers.__version__}: max |logit diff| {diff:.2e}; prompt ids match: {same_ids}")
    except Exception as e:  # noqa: BLE001 (a report, not a requirement)
        log(f"transformers check skipped: {type(e).__name__}: {e}")

    ref["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    log(f"done in {ref['total_seconds']} s -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
