"""Lesson 08's solution (a Llama model, Hugging Face free): the loader, prefill and decode against transformers'
LlamaForCausalLM on checkpoints that transformers itself wrote, the two decode kernels through the lesson's own
check_* helpers, planted mistakes that those checks must name, sampling, and every refusal.

On the CPU everything runs in Triton's interpreter with a tiny fp32 model (2 layers, hidden 64, 4 query heads
sharing 2 key/value heads, D = 16, vocabulary 320); on a GPU the same tests run compiled, still fp32, and the decode
loop is replayed from a CUDA graph.
"""

import dataclasses
import itertools
import json
import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import utils
import utils.checkpoints as ckpt
from lessons import l08_llama_model as L
from lessons.l07_llm_layer import norm_weight, rmsnorm_ref, rope_tables
from utils.bitwise import assert_bitwise_equal
from utils.mode import current
from utils.mutants import plant
from utils.order import programs_in_order

ENV = current()
# fp32 logits of two layers against HF's: the same arithmetic in another order (CPU); on a GPU lesson 06's prefill
# attention multiplies fp32 tiles as TF32 (10-bit mantissas), which costs ~1e-3 relative
LOGITS_TOL = ENV.pick(cpu=1e-4, gpu=2e-2)
LOGITS_REASON = ENV.pick(
    cpu="fp32 on both sides, sums in another order through 2 layers; logits ~10",
    gpu="lesson 06's prefill attention runs fp32 tiles as TF32 on a GPU (10-bit mantissas); logits ~10",
)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,  # D = 16 wavelengths span 6 .. 20000: all three regimes occur
}


def hf_checkpoint(folder, *, tie=True, rope=None, shards=False, seed=0, head_dim=None, **fields):
    """A tiny Llama checkpoint written by transformers (save_pretrained) with unit-scale random weights, plus a
    tokenizer.json from utils.checkpoints; returns (folder, the HF model in fp32 on the lesson's device). fields:
    other LlamaConfig fields, over the tiny shape's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = ckpt.build_tokenizer(folder)
    shape = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
    )
    config = LlamaConfig(
        **{**shape, **fields},
        tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, **(rope or {})},
        **({} if head_dim is None else {"head_dim": head_dim}),
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # HF's init (std 0.02) makes near-uniform logits: greedy tokens would all tie
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed" in name:  # small: a tied head would otherwise predict the input token again and again
                p.normal_(0, 0.1)
            else:
                p.normal_(0, 1 / math.sqrt(p.shape[1]))
    model.save_pretrained(folder, max_shard_size="100KB" if shards else "10GB")
    return folder, model.to(ENV.device)


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    folder, hf = hf_checkpoint(tmp_path_factory.mktemp("tied"))
    return L.load_model(folder, dtype=torch.float32), hf


def prompt(B=2, T=7, V=320, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed)).to(ENV.device)


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(ids).logits


def check_prefill_logits(model, hf, ids):
    cache = L.new_cache(model, ids.shape[0], ids.shape[1])
    ours = L.prefill(model, ids, cache, all_logits=True)
    utils.check(ours, hf_logits(hf, ids), atol=LOGITS_TOL, rtol=LOGITS_TOL, reason=LOGITS_REASON, quiet=True)


# -- against Hugging Face ------------------------------------------------------------------------------------------


def test_loader_reads_what_transformers_wrote(tied):
    model, hf = tied
    assert model.lm_head is model.embed  # tied: one tensor, not a copy
    assert model.args.n_layers == 2 and model.args.n_kv_heads == 2 and model.args.norm_eps == 1e-5
    w = model.layers[1]
    attn = hf.model.layers[1].self_attn
    assert torch.equal(w.wqkv, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))


def test_prefill_logits_match_hf(tied):
    check_prefill_logits(*tied, prompt())


def test_greedy_generation_is_identical_to_hf(tied):
    """32 greedy tokens, fp32: exactly HF's generate(do_sample=False) (EOS switched off on both sides)."""
    model, hf = tied
    ids = prompt(B=1, T=6)
    ours = L.generate(model, ids, 32)
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        want = hf.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0)
    assert ours.shape == want.shape
    differ = torch.nonzero(ours != want)
    assert not len(differ), f"first differing token at {differ[0].tolist()}: ours {ours.tolist()}, HF {want.tolist()}"
    assert len(set(ours[0, 6:].tolist())) > 3, "a degenerate sequence proves little: change the seed"


def test_kv_cache_path_matches_recomputing_the_prefix(tied):
    model, hf = tied
    L.check_model(model, B=1, T=5, steps=2, quiet=True)  # against forward_ref in fp64
    # and against HF directly: each decode step's logits against HF's forward over the whole prefix
    ids = prompt(B=2, T=8)
    cache = L.new_cache(model, 2, 8)
    L.prefill(model, ids[:, :5], cache)
    pos = torch.full((2,), 5, dtype=torch.int32, device=ENV.device)
    want = hf_logits(hf, ids)
    for t in range(5, 8):
        got = L.decode_step(model, ids[:, t], pos, cache)
        pos += 1
        utils.check(got, want[:, t], atol=LOGITS_TOL, rtol=LOGITS_TOL, reason=LOGITS_REASON, quiet=True)


def test_generate_agrees_with_the_reference_path(tied):
    model, _ = tied
    ids = prompt(B=2, T=4)
    assert torch.equal(L.generate(model, ids, 4), L.generate(model, ids, 4, kernels=False, cuda_graph=False))


def test_numpy_integers_are_taken_as_ints(tied):
    """(session 38) max_new_tokens and top_k as NumPy integers were refused ("must be a positive int, got
    np.int64(4)"): taken as the int they hold, the same tokens; a float is still refused."""
    import numpy as np

    model, _ = tied
    ids = prompt(B=2, T=4)
    assert torch.equal(L.generate(model, ids, np.int64(4)), L.generate(model, ids, 4))
    logits = torch.randn(6, 10, device=ENV.device)
    torch.manual_seed(1)
    drawn = L.sample(logits, temperature=1.0, top_k=np.int32(3))
    torch.manual_seed(1)
    assert torch.equal(drawn, L.sample(logits, temperature=1.0, top_k=3))
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        L.generate(model, ids, np.float64(4))
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        L.sample(logits, top_k=3.0)


def test_llama3_rope_scaling_matches_hf(tmp_path):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    folder, hf = hf_checkpoint(tmp_path, rope=LLAMA3)
    model = L.load_model(folder, dtype=torch.float32)
    assert model.args.rope_scaling["rope_type"] == "llama3"
    want = LlamaRotaryEmbedding(hf.config).inv_freq.cpu()
    got = L.rope_frequencies(model.args)
    assert not torch.allclose(got, L.rope_frequencies(L.ModelArgs(**{**vars(model.args), "rope_scaling": None})))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    check_prefill_logits(model, hf, prompt(B=1, T=40))  # positions past original_max_position_embeddings


def test_rope_scaling_in_the_hub_layout_is_read(tmp_path):
    """The files on the Hub keep rope_theta and rope_scaling at the top level (transformers 4's layout)."""
    config = json.loads((ckpt.build_checkpoint(tmp_path) / "config.json").read_text())
    config.update(rope_theta=500000.0, rope_scaling={**LLAMA3, "rope_type": "llama3"})
    args = L.model_args(config)
    assert args.rope_theta == 500000.0 and args.rope_scaling["factor"] == 8.0


def test_a_config_with_both_rope_keys_is_read_as_transformers_reads_it(tmp_path):
    """(session 36) A transformers 5 config.json (rope_parameters) with a transformers 4 rope_scaling added: both
    versions of transformers read rope_scaling, and the top-level rope_theta (absent: 10000), leaving rope_parameters
    out. The loader read rope_parameters (here theta 500000, no scaling): logits silently not transformers'."""
    from transformers import LlamaForCausalLM

    folder, _ = hf_checkpoint(tmp_path, seed=8, num_hidden_layers=1, rope={"rope_theta": 500000.0})
    config = json.loads((folder / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}
    (folder / "config.json").write_text(json.dumps(config))
    hf = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").to(ENV.device).eval()
    assert hf.config.rope_parameters["rope_type"] == "linear" and hf.config.rope_parameters["rope_theta"] == 10000.0
    model = L.load_model(folder, dtype=torch.float32)
    assert model.args.rope_scaling["factor"] == 4.0 and model.args.rope_theta == 10000.0
    check_prefill_logits(model, hf, prompt(B=1, T=12))
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 2.0}  # refused naming the key it was read from
    with pytest.raises(ValueError, match="config.json's rope_scaling: RoPE type 'yarn' is not implemented"):
        L.model_args(config)


def test_dynamic_ntk_rope_is_plain_rope_up_to_max_position_embeddings(tmp_path):
    """(session 53) transformers' dynamic NTK RoPE keeps the base until a position reaches max_position_embeddings,
    then raises it as the sequence grows (and the keys cached keep their old angles). Up to there it runs: the
    logits and greedy tokens are HF's; a max_len past it is refused before any launch; it was refused whole."""
    folder, hf = hf_checkpoint(tmp_path, seed=6, rope={"rope_type": "dynamic", "factor": 2.0},
                               max_position_embeddings=24)  # fmt: skip
    model = L.load_model(folder, dtype=torch.float32)
    assert model.args.rope_scaling == {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0,
                                       "max_position_embeddings": 24}  # fmt: skip
    check_prefill_logits(model, hf, prompt(B=2, T=20))
    ids = prompt(B=1, T=6, seed=3)
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        want = hf.generate(ids, max_new_tokens=18, do_sample=False, pad_token_id=0)  # the last position is 23
    assert torch.equal(L.generate(model, ids, 18), want)
    with pytest.raises(ValueError, match="max_position_embeddings=24 positions, and max_len=25 goes past them"):
        L.generate(model, ids, 19)
    config = json.loads((folder / "config.json").read_text())
    del config["max_position_embeddings"]
    with pytest.raises(ValueError, match="'dynamic' needs config.json's max_position_embeddings"):
        L.model_args(config)


def test_untied_embeddings(tmp_path):
    folder, hf = hf_checkpoint(tmp_path, tie=False, seed=3)
    model = L.load_model(folder, dtype=torch.float32)
    assert model.lm_head is not model.embed and not torch.equal(model.lm_head, model.embed)
    check_prefill_logits(model, hf, prompt(B=1, T=5))


def test_a_head_width_set_apart_from_hidden_over_heads(tmp_path):
    """head_dim 32 with hidden 64 and 4 heads (HF reads config.head_dim; q_proj is (128, 64), o_proj (64, 128)):
    the prefill's logits as HF's, and the greedy tokens of the decode loop (its fused steps) exactly HF's."""
    folder, hf = hf_checkpoint(tmp_path, seed=5, head_dim=32)
    model = L.load_model(folder, dtype=torch.float32)
    assert model.args.head_dim == 32 and model.layers[0].wqkv.shape == ((4 + 2 * 2) * 32, 64)
    check_prefill_logits(model, hf, prompt(B=2, T=7))
    ids = prompt(B=1, T=6, seed=2)
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        want = hf.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(L.generate(model, ids, 8), want)


def test_sharded_checkpoint(tmp_path):
    folder, hf = hf_checkpoint(tmp_path, shards=True, seed=4)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1, "save_pretrained wrote a single file: shrink max_shard_size"
    check_prefill_logits(L.load_model(folder, dtype=torch.float32), hf, prompt(B=1, T=5))


def test_a_folder_with_both_a_single_file_and_an_index_is_read_as_hf_reads_it(tmp_path):
    """save_pretrained into a folder that already held another model's shards leaves both model.safetensors and the
    old index there; transformers reads the single file, and the loader read the index's shards (another model)."""
    import shutil

    old, _ = hf_checkpoint(tmp_path / "old", shards=True, seed=4)
    folder, hf = hf_checkpoint(tmp_path / "new", seed=5)
    assert (folder / "model.safetensors").is_file() and not (folder / "model.safetensors.index.json").exists()
    for f in old.glob("model-*.safetensors"):
        shutil.copy(f, folder)
    shutil.copy(old / "model.safetensors.index.json", folder)
    from transformers import LlamaForCausalLM

    reread = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).to(hf.device).eval()
    assert torch.equal(reread.lm_head.weight, hf.lm_head.weight), "transformers no longer prefers the single file"
    check_prefill_logits(L.load_model(folder, dtype=torch.float32), hf, prompt(B=1, T=5))


# configs of shapes the other tests never use (the held-out battery's kind): prefill logits as HF's, greedy tokens
# exactly HF's generate. "swish" is transformers' other name of silu: it used to be refused.
UNSEEN_CONFIGS = {
    "vocab 1001, hidden 96, GQA 3, odd ffn": dict(vocab_size=1001, hidden_size=96, num_attention_heads=6,
                                                   num_key_value_heads=2, intermediate_size=201),
    "MQA, GQA 5, hidden 80, swish": dict(hidden_size=80, num_attention_heads=5, num_key_value_heads=1,
                                         intermediate_size=144, hidden_act="swish"),
    "MHA, head_dim 32 apart from 80 / 2, untied, eps 1e-6": dict(hidden_size=80, num_attention_heads=2,
                                                                 num_key_value_heads=2, head_dim=32, tie=False,
                                                                 rms_norm_eps=1e-6),
    "head_dim 128, MQA, 1 layer, llama3 RoPE, theta 500000": dict(num_attention_heads=2, num_key_value_heads=1,
                                                                  head_dim=128, num_hidden_layers=1,
                                                                  rope={**LLAMA3, "rope_theta": 500000.0}),
    "head_dim 24 (hidden 96 over 4 heads), padded to 32": dict(hidden_size=96, num_attention_heads=4,
                                                               num_key_value_heads=2, intermediate_size=64),
    "head_dim 8 (transformers' test shape), padded to 16, MHA": dict(hidden_size=32, num_attention_heads=4,
                                                                     num_key_value_heads=4, intermediate_size=37),
    "head_dim 100 apart from 64 / 2, padded to 128, llama3 RoPE": dict(num_attention_heads=2, num_key_value_heads=1,
                                                                       head_dim=100, num_hidden_layers=1, rope=LLAMA3),
    # session 52: fields transformers' Llama reads and the loader leaves out, rightly: pretraining_tp splits the
    # MLP's matmuls into slices (the same sums), max_position_embeddings bounds nothing with these RoPE types
    "linear RoPE x4, MHA, eps 0.5, pretraining_tp 2, max_position_embeddings 4 < prompt + new": dict(
        num_key_value_heads=4, rms_norm_eps=0.5, pretraining_tp=2, max_position_embeddings=4,
        rope={"rope_type": "linear", "factor": 4.0}),
}  # fmt: skip


@pytest.mark.parametrize("fields", list(UNSEEN_CONFIGS.values()), ids=list(UNSEEN_CONFIGS))
def test_unseen_configs_match_hf(tmp_path, fields):
    folder, hf = hf_checkpoint(tmp_path, seed=7, **fields)
    model = L.load_model(folder, dtype=torch.float32)
    V = hf.config.vocab_size
    check_prefill_logits(model, hf, prompt(B=2, T=6, V=V))
    ids = prompt(B=1, T=5, V=V, seed=2)
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        want = hf.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(L.generate(model, ids, 5), want)


# configs that transformers writes for models this loader cannot run (session 52's held-out battery): each refused
# from config.json alone, before a weight is read, naming its field and what the lesson runs
REFUSED_CONFIGS = {
    "Mistral (sliding window)": ("Mistral", dict(sliding_window=4), "model_type 'mistral', but this loader runs Llama"),
    "Qwen2 (q/k/v biases)": ("Qwen2", {}, "model_type 'qwen2', but this loader runs Llama models only"),
    "Gemma ((1 + w) norms, scaled embeddings)": ("Gemma", dict(head_dim=16), "model_type 'gemma', but"),
    "Phi3 (fused qkv)": ("Phi3", {}, "model_type 'phi3', but"),
    "YaRN RoPE": ("Llama", dict(rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 64}), "RoPE type 'yarn'"),
    "LongRoPE": ("Llama", dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 8,
                                                 "long_factor": [2.0] * 8, "original_max_position_embeddings": 64}),
                 "RoPE type 'longrope'"),
    "gelu MLP": ("Llama", dict(hidden_act="gelu"), "hidden_act 'gelu': the SwiGLU kernel computes silu"),
    "attention biases": ("Llama", dict(attention_bias=True), "sets attention_bias: this model's projections"),
    "MLP biases": ("Llama", dict(mlp_bias=True), "sets mlp_bias: this model's projections"),
}  # fmt: skip


@pytest.mark.parametrize("cls, fields, message", list(REFUSED_CONFIGS.values()), ids=list(REFUSED_CONFIGS))
def test_configs_of_models_the_loader_cannot_run_are_refused_before_any_weight(tmp_path, cls, fields, message):
    """config.json as transformers writes it (a config's save_pretrained: no architectures), in a folder with no
    weights: the config's refusal comes first. Without architectures, another model_type was told as "model_type
    'mistral' (LlamaForCausalLM)", an architecture config.json does not name (session 52)."""
    import transformers

    getattr(transformers, cls + "Config")(**dict(vocab_size=300, hidden_size=64, intermediate_size=96,
                                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
                                           **fields).save_pretrained(tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match=message):
        L.load_model(tmp_path)


def test_a_checkpoint_of_pytorch_bin_files_is_refused(tmp_path):
    """transformers 5 writes safetensors only; older checkpoints hold pytorch_model.bin, which this loader does not
    read (a pickle): told as such, not as a folder without weights."""
    folder = ckpt.build_checkpoint(tmp_path)
    torch.save(L.load_state_dict(folder), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"PyTorch \.bin files are not read here"):
        L.load_model(folder)


def _quantized_checkpoint(folder):
    """A local checkpoint stored as fbgemm's fp8 would store it: each projection in float8_e4m3fn beside its scale,
    and a quantization_config saying so. Cast to fp32 without the scales, the weights are ~100x too large."""
    from safetensors.torch import save_file

    ckpt.build_checkpoint(folder)
    state = {}
    for name, t in L.load_state_dict(folder).items():
        if name.endswith("_proj.weight"):
            scale = t.abs().amax() / 448  # e4m3's largest number
            state[name], state[name.replace(".weight", ".weight_scale")] = (t / scale).to(torch.float8_e4m3fn), scale
        else:
            state[name] = t
    save_file(state, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fbgemm_fp8"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_quantized_checkpoint_is_refused(tmp_path):
    """The stored dtype's refusal asks for dtype=torch.float32, which then cast the fp8 weights without their scales:
    logits silently wrong. A quantization_config is refused first, by its quant_method."""
    folder = _quantized_checkpoint(tmp_path)
    for dtype in (torch.float32, None):
        with pytest.raises(ValueError, match="quantization_config \\(quant_method 'fbgemm_fp8'\\).*unquantized"):
            L.load_model(folder, dtype=dtype)


def test_quantized_weights_without_a_quantization_config_are_refused(tmp_path):
    """The same fp8 weights with the config's quantization_config removed: before, dtype=torch.float32 cast them
    without their scales (logits silently wrong). The stored dtype is refused by name, whatever dtype asks for."""
    folder = _quantized_checkpoint(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    del config["quantization_config"]
    (folder / "config.json").write_text(json.dumps(config))
    for dtype in (torch.float32, None):
        with pytest.raises(TypeError, match=r"q_proj\.weight is stored as torch\.float8_e4m3fn: quantized weights"):
            L.load_model(folder, dtype=dtype)


@pytest.mark.skipif(not ENV.is_gpu, reason="bfloat16 needs a GPU: the interpreter has none")
def test_bf16_prefill_error_no_worse_than_hfs_own(tmp_path):
    """bf16 logits against HF in fp32 (the truth): our error no worse than HF's own bf16 model's, times 1.25."""
    folder, hf = hf_checkpoint(tmp_path, seed=5)
    ids = prompt(B=2, T=100)
    truth = hf_logits(hf, ids).double()
    hf_bf16 = hf_logits(hf.to(torch.bfloat16), ids).double()
    model = L.load_model(folder, dtype=torch.bfloat16)
    ours = L.prefill(model, ids, L.new_cache(model, 2, 100), all_logits=True).double()
    err, err_hf = (float((t - truth).norm() / truth.norm()) for t in (ours, hf_bf16))
    assert err <= 1.25 * err_hf, f"relative error {err:.2e} vs HF's own bf16 {err_hf:.2e}"


@pytest.mark.skipif(not ENV.is_gpu, reason="bfloat16 needs a GPU: the interpreter has none")
def test_bf16_greedy_tokens_differ_only_at_near_ties(tmp_path):
    """In bf16 the greedy tokens may part from fp32's at a near tie: check_generate reports the first such step
    and fails on any token that is not within bf16's error of the fp64 argmax."""
    folder, _ = hf_checkpoint(tmp_path, seed=6)
    L.check_generate(L.load_model(folder, dtype=torch.bfloat16), 64)  # prints the first divergence (pytest -s)


def test_local_checkpoint_loads_in_transformers_too(tmp_path):
    """utils.checkpoints writes the Hub's layout: transformers reads it and computes the same logits as we do."""
    from transformers import LlamaForCausalLM

    folder = ckpt.build_checkpoint(tmp_path, shards=2)
    hf = LlamaForCausalLM.from_pretrained(folder).to(ENV.device).eval()
    check_prefill_logits(L.load_model(folder, dtype=torch.float32), hf, prompt(B=1, T=5))


def test_download_or_build_falls_back_without_network(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder, real = ckpt.download_or_build("HuggingFaceTB/SmolLM2-135M-Instruct", local_dir=tmp_path)
    assert not real and (folder / "model.safetensors").is_file()
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "HF_HUB_OFFLINE" in out[0] and "random weights" in out[0]


# -- the kernels, checked as the lesson checks them ---------------------------------------------------------------


def test_rope_kv_write():
    L.check_rope_kv_write(L.rope_kv_write, quiet=True)


def test_decode_attention():
    L.check_decode_attention(L.decode_attention, quiet=True)


@pytest.mark.parametrize("n_splits", [1, 2, 5])
def test_decode_attention_any_number_of_splits(n_splits):
    B, H, KV, D, max_len = 2, 4, 2, 16, 70
    q = torch.randn(B, H, D, device=ENV.device)
    k, v = (torch.randn(B, max_len, KV, D, device=ENV.device) for _ in range(2))
    lengths = torch.tensor([3, 70], dtype=torch.int32, device=ENV.device)
    out = L.decode_attention(q, k, v, lengths, n_splits=n_splits, out=utils.nan_empty((B, H, D)))
    utils.check(out, L.decode_attention_ref(q.double(), k.double(), v.double(), lengths), quiet=True)


# peers' shapes (vLLM's, FlashInfer's decode-attention tests, shrunk for the interpreter): head widths, GQA ratios
# 1 .. 32 (MQA), batches with lengths far apart, caches exactly as long as the sequence, fp16 and fp32
PEER_DECODE_SHAPES = {
    "D32 GQA4 lengths 1, 15, 16": (32, 8, 2, 16, [1, 15, 16], torch.float32),
    "D128 GQA4 fp16": (128, 8, 2, 40, [40, 1, 17], torch.float16),
    "D64 GQA7 MQA": (64, 7, 1, 17, [17, 2], torch.float32),
    "D32 MQA of 32 heads": (32, 32, 1, 17, [2, 17], torch.float32),
    "D32 GQA1, lengths 1 and 2000": (32, 2, 2, 2000, [1, 2000], torch.float32),
    "D16 B17": (16, 4, 2, 33, [1, 2, 15, 16, 17, 33] * 2 + [1, 5, 9, 33, 20], torch.float16),
}


@pytest.mark.parametrize("D, H, KV, max_len, lengths, dtype", PEER_DECODE_SHAPES.values(), ids=PEER_DECODE_SHAPES)
def test_decode_attention_at_peers_shapes(D, H, KV, max_len, lengths, dtype):
    B, d = len(lengths), ENV.device
    q = torch.randn(B, H, D, device=d).to(dtype)
    k, v = (torch.randn(B, max_len, KV, D, device=d).to(dtype) for _ in range(2))
    lengths = torch.tensor(lengths, dtype=torch.int32, device=d)
    out = L.decode_attention(q, k, v, lengths, out=utils.nan_empty((B, H, D), dtype=dtype))
    utils.check(out, L.decode_attention_ref(q.double(), k.double(), v.double(), lengths), quiet=True)


def test_a_sequence_with_no_key_is_nan_in_the_kernel_and_in_the_reference():
    """Lengths stay on the GPU, unread: a length below 1 leaves a softmax over nothing, 0 / 0. The kernel's row is
    NaN, and so must the reference's be (an empty sum 0 would pass for a result); the other rows are unharmed."""
    d = ENV.device
    q = torch.randn(3, 4, 16, device=d)
    k, v = (torch.randn(3, 8, 2, 16, device=d) for _ in range(2))
    lengths = torch.tensor([0, 8, -1], dtype=torch.int32, device=d)
    out = L.decode_attention(q, k, v, lengths)
    ref = L.decode_attention_ref(q.double(), k.double(), v.double(), lengths)
    assert out[[0, 2]].isnan().all() and ref[[0, 2]].isnan().all()
    utils.check(out[1:2], ref[1:2], quiet=True)


def test_empty_batches_return_empty_results():
    q = torch.randn(0, 4, 16, device=ENV.device)
    cache = torch.zeros(0, 8, 2, 16, device=ENV.device)
    lengths = torch.zeros(0, dtype=torch.int32, device=ENV.device)
    assert L.decode_attention(q, cache, cache, lengths).shape == (0, 4, 16)
    qkv = torch.randn(0, 8, 16, device=ENV.device)
    cos = torch.ones(8, 16, device=ENV.device)
    assert L.rope_kv_write(qkv, cos, cos, lengths, cache, cache.clone()).shape == (0, 4, 16)


# -- planted mistakes: each check must name the mistake -----------------------------------------------------------


def _rope_kv_write_at(shift_row=0, shift_angle=0):
    """A launcher with a classic mistake: writes to row pos + shift_row, or rotates by the angle of pos +
    shift_angle (the tables rolled), otherwise the lesson's kernel."""

    def wrong(qkv, cos, sin, pos, k_cache, v_cache, *, out=None):
        if shift_angle:
            cos, sin = cos.roll(-shift_angle, 0).contiguous(), sin.roll(-shift_angle, 0).contiguous()
        if not shift_row:
            return L.rope_kv_write(qkv, cos, sin, pos, k_cache, v_cache, out=out)
        k_tmp, v_tmp = k_cache.clone(), v_cache.clone()
        q = L.rope_kv_write(qkv, cos, sin, pos, k_tmp, v_tmp, out=out)
        rows, p = torch.arange(len(pos)), pos.long()
        k_cache[rows, p + shift_row] = k_tmp[rows, p]
        v_cache[rows, p + shift_row] = v_tmp[rows, p]
        return q

    return wrong


def test_check_names_kv_written_at_the_wrong_position():
    with pytest.raises(AssertionError, match=r"written to row pos \+ 1"):
        L.check_rope_kv_write(_rope_kv_write_at(shift_row=1), quiet=True)


@pytest.mark.parametrize("shift, sign", [(1, r"\+"), (-1, "-")])
def test_check_names_rope_position_off_by_one(shift, sign):
    with pytest.raises(AssertionError, match=rf"angle of position pos {sign} 1"):
        L.check_rope_kv_write(_rope_kv_write_at(shift_angle=shift), quiet=True)


@pytest.mark.parametrize(
    "edit, words",
    [
        (("write = (kv < KV) & inside", "write = kv < KV"), "must write nothing: mask the k and v stores"),
        (('other=float("nan")', "other=0.0"), "must come out NaN"),
    ],
    ids=["stores not guarded", "angles of 0 outside"],
)
def test_check_names_a_position_outside_the_cache(edit, words, monkeypatch, tmp_path):
    """Positions live on the GPU, so the kernel guards its own stores: one that writes a row for a position of -1
    or max_len (into a neighbouring sequence's rows, or past the caches) is told so, and one whose q there is not
    NaN too (its angles loaded as 0, never from outside the tables). The lesson's kernel passes (test_rope_kv_write)."""
    plant(monkeypatch, tmp_path, L, "rope_kv_write_kernel", edit)
    with pytest.raises(AssertionError, match=words):
        L.check_rope_kv_write(L.rope_kv_write, quiet=True)


@pytest.mark.skipif(not ENV.interpret, reason="memory is watched under the interpreter only")
def test_check_rope_kv_write_tells_q_loaded_without_its_mask(monkeypatch, tmp_path):
    """(session 52F, from utils.mutants) q's loads without mask=heads < H read the tile's spare rows, heads H ..
    BLOCK_H - 1 of the token: k and v heads, stored nowhere, unless BLOCK_H passes H + 2 KV. H = 5, KV = 1 (BLOCK_H
    8, heads 5 .. 7 of 7) reads past the row, past qkv at the last token; no CPU case had such an H, and the mutant
    passed."""
    old = "q1 = tl.load(src + heads * HEAD_DIM + half, mask=heads < H, other=0.0)"
    plant(monkeypatch, tmp_path, L, "rope_kv_write_kernel", (old, "q1 = tl.load(src + heads * HEAD_DIM + half)"))
    with pytest.raises(AssertionError, match="qkv_ptr"):
        L.check_rope_kv_write(L.rope_kv_write, quiet=True)


def test_decode_qkv_rope_writes_nothing_for_a_position_outside_the_cache():
    """The fused qkv GEMV's epilogue guards its stores as rope_kv_write_kernel does: positions -1 and max_len leave
    every row of the caches (views into a larger buffer) as it was, and q NaN."""
    H, KV, D, C, max_len = 4, 2, 16, 24, 6
    x = torch.randn(1, C, device=ENV.device)
    w = torch.randn((H + 2 * KV) * D, C, device=ENV.device) / math.sqrt(C)
    fake = L.ModelArgs(vocab_size=1, n_layers=1, dim=H * D, n_heads=H, n_kv_heads=KV, ffn_dim=1)
    cos, sin = L.rope_cache(fake, max_len, torch.float32)
    for p in (-1, max_len):
        buffer = torch.randn(2, 3, max_len, KV, D, device=ENV.device)
        before = buffer.clone()
        pos = torch.tensor([p], device=ENV.device, dtype=torch.int32)
        with utils.watch_memory() as stray:
            q = L.decode_qkv_rope(x, w, cos, sin, pos, buffer[0, 1:2], buffer[1, 1:2])
        assert torch.equal(buffer, before), f"pos {p}: the caches or their neighbours changed"
        assert bool(q.isnan().all()), f"pos {p}: q should be NaN"
        assert not stray, f"pos {p}: {stray}"


def _rope_kv_write_like(mistake):
    """rope_kv_write in PyTorch (fp32, rounded once, as a kernel would) with one classic mistake of the kernel."""

    def wrong(qkv, cos, sin, pos, k_cache, v_cache, *, out=None):
        KV, D = k_cache.shape[2], qkv.shape[2]
        H, p, rows = qkv.shape[1] - 2 * KV, pos.long(), torch.arange(qkv.shape[0], device=qkv.device)
        angle = rows if mistake == "angle_of_b" else p  # cos_ptr + b * HEAD_DIM: the row of the sequence's index
        q, k, v = qkv.float().split([H, KV, KV], dim=1)
        k_src = q[:, :KV] if mistake == "k_from_q" else k  # src + kv * HEAD_DIM: forgot + H
        q_rot, k_rot = L.rope_ref(q[:, None], k_src[:, None], cos.float()[angle][:, None], sin.float()[angle][:, None])
        k_rot = k_rot[:, 0].roll(D // 2, -1) if mistake == "k_halves" else k_rot[:, 0]
        k_cache[rows, p] = k_rot.to(k_cache.dtype)
        v_cache[rows, p] = (k if mistake == "v_from_k" else v).to(v_cache.dtype)  # H + kv, not H + KV + kv
        return out.copy_(q_rot[:, 0])

    return wrong


@pytest.mark.parametrize(
    "mistake, hint",
    [("angle_of_b", "angle of position b"), ("k_from_q", "k holds q's first heads"),
     ("v_from_k", "v holds k's values"), ("k_halves", "k's two halves are stored swapped")],
)  # fmt: skip
def test_check_names_rope_kv_write_mistakes(mistake, hint):
    with pytest.raises(AssertionError, match=hint) as failure:
        L.check_rope_kv_write(_rope_kv_write_like(mistake), quiet=True)
    assert "head % KV" not in str(failure.value) and "was not rotated" not in str(failure.value)


def test_check_names_v_rotated():
    def rotates_v(qkv, cos, sin, pos, k_cache, v_cache, *, out=None):
        q = L.rope_kv_write(qkv, cos, sin, pos, k_cache, v_cache, out=out)
        v, p = qkv[:, -k_cache.shape[2] :], pos.long()
        _, v_rot = L.rope_ref(v[:, None], v[:, None], cos[p][:, None], sin[p][:, None])
        v_cache[torch.arange(len(p)), p] = v_rot[:, 0]  # v turned like k
        return q

    with pytest.raises(AssertionError, match="v was rotated"):
        L.check_rope_kv_write(rotates_v, quiet=True)


def test_check_names_partials_combined_without_rescaling():
    def no_rescale(q, k_cache, v_cache, lengths, *, out=None):
        acc, m, l_ = L.decode_partials(q, k_cache, v_cache, lengths)  # the lesson's first kernel
        return out.copy_(acc.sum(2) / l_.sum(2)[..., None])  # a combine that forgets exp2(m_i - m)

    with pytest.raises(AssertionError, match="without rescaling"):
        L.check_decode_attention(no_rescale, quiet=True)


def test_check_names_exp_where_the_scores_are_in_base_2():
    def natural_exp(q, k_cache, v_cache, lengths, *, out=None):  # exp(s log2 e): q's scores log2(e) times too large
        return L.decode_attention((q.double() * L.LOG2E).to(q.dtype), k_cache, v_cache, lengths, out=out)

    with pytest.raises(AssertionError, match="tl.exp where the scores are in base 2"):
        L.check_decode_attention(natural_exp, quiet=True)


def test_check_names_a_combine_that_averages_the_splits():
    def averaged(q, k_cache, v_cache, lengths, *, out=None):
        acc, m, l_ = L.decode_partials(q, k_cache, v_cache, lengths)
        return out.copy_((acc / l_[..., None]).nan_to_num(0.0).sum(2) / (l_ > 0).sum(2, keepdim=True))

    with pytest.raises(AssertionError, match="averaged each split's own result"):
        L.check_decode_attention(averaged, quiet=True)


def _flash_decoding_without(forgot):
    """Flash-decoding in PyTorch, split by split and BLOCK_N keys at a time as the kernel walks them, with acc or l_i
    not rescaled by alpha = exp2(m_old - m_new) when the running max grows (base 2, as the kernel)."""

    def wrong(q, k_cache, v_cache, lengths, *, out=None):
        (B, H, D), KV = q.shape, k_cache.shape[2]
        _, split_len, block = L.decode_split(B, KV, k_cache.shape[1], head_dim=D)
        for b, n in enumerate(lengths.tolist()):
            for h in range(H):
                k, v = k_cache[b, :n, h // (H // KV)].float(), v_cache[b, :n, h // (H // KV)].float()
                s = k @ q[b, h].float() * (math.log2(math.e) / math.sqrt(D))
                parts = []  # (m, l, acc) of each split
                for lo in range(0, n, split_len):
                    dev = q.device
                    m, l_i = torch.tensor(float("-inf"), device=dev), torch.tensor(0.0, device=dev)
                    acc = torch.zeros(D, device=dev)
                    for j in range(lo, min(lo + split_len, n), block):
                        s_j = s[j : min(j + block, lo + split_len, n)]
                        m_new = torch.maximum(m, s_j.max())
                        alpha, p = torch.exp2(m - m_new), torch.exp2(s_j - m_new)
                        l_i = (l_i if forgot == "l_i" else l_i * alpha) + p.sum()
                        acc = (acc if forgot == "acc" else acc * alpha) + p @ v[j : j + len(s_j)]
                        m = m_new
                    parts.append((m, l_i, acc))
                m_all = max(m for m, _, _ in parts)
                out[b, h] = sum(torch.exp2(m - m_all) * a for m, _, a in parts) / sum(
                    torch.exp2(m - m_all) * l_ for m, l_, _ in parts
                )
        return out

    return wrong


@pytest.mark.parametrize("forgot", ["acc", "l_i"])
def test_check_names_a_split_without_the_alpha_rescale(forgot):
    with pytest.raises(AssertionError, match=f"{forgot} is not rescaled") as failure:
        L.check_decode_attention(_flash_decoding_without(forgot), quiet=True)
    assert "head % KV" not in str(failure.value)


def test_check_names_keys_read_past_the_length():
    def whole_cache(q, k_cache, v_cache, lengths, *, out=None):
        return L.decode_attention(q, k_cache, v_cache, torch.full_like(lengths, k_cache.shape[1]), out=out)

    with pytest.raises(AssertionError, match="past the sequence's length"):
        L.check_decode_attention(whole_cache, quiet=True)


def test_check_names_a_length_past_the_cache_read_unclamped(monkeypatch, tmp_path):
    """(probe08) decode_attention's kernel without tl.minimum(..., max_len) passed: every length of the check lay
    within the cache, yet the launcher promises that a length past max_len reads the max_len rows there are (lengths
    live on the GPU, unread). Unclamped, a sequence read on into the next one's rows, and the last past its caches."""
    edit = ("length = tl.minimum(tl.load(lengths_ptr + b), max_len)", "length = tl.load(lengths_ptr + b)")
    plant(monkeypatch, tmp_path, L, "decode_attention_kernel", edit)
    with pytest.raises(AssertionError, match="A length past max_len read on past the sequence's cache"):
        L.check_decode_attention(L.decode_attention, quiet=True)


def test_check_names_the_new_tokens_key_missing():
    def one_short(q, k_cache, v_cache, lengths, *, out=None):
        return L.decode_attention(q, k_cache, v_cache, (lengths - 1).clamp_min(1), out=out)

    with pytest.raises(AssertionError, match="own key is missing"):
        L.check_decode_attention(one_short, quiet=True)


def test_check_names_wrong_gqa_head_mapping():
    def modulo(q, k_cache, v_cache, lengths, *, out=None):
        KV, H = k_cache.shape[2], q.shape[1]
        heads = torch.arange(H, device=q.device) % KV
        k, v = k_cache[:, :, heads].contiguous(), v_cache[:, :, heads].contiguous()
        return L.decode_attention(q, k, v, lengths, out=out)

    with pytest.raises(AssertionError, match=r"h % KV"):
        L.check_decode_attention(modulo, quiet=True)


HEADS = "heads = b * KV * GROUP + kv_h * GROUP + rows"


@pytest.mark.parametrize(
    "edit, words",
    [
        (
            (HEADS, "heads = b * KV * GROUP + kv_h * KV + rows"),
            r"h // GROUP: head \d+ of sequence \d+( read kv head \d+ \(not \d+\)|.* match no kv head's attention: "
            r"with kv_h \* KV \+ r no program writes them, while \d+ head\(s\) get two programs or more)",
        ),
        ((HEADS, "heads = b * KV * GROUP + kv_h + rows * KV"), r"Query head h read kv head h % KV"),
        ((HEADS, "heads = b * KV + kv_h * GROUP + rows"), r"Sequence b > 0 read and wrote other sequences' rows"),
    ],
    ids=["KV for GROUP", "h % KV", "sequence offset b * KV"],
)
@pytest.mark.parametrize("order", [None, "reversed", "shuffled"])
def test_check_names_a_planted_gqa_mistake(edit, words, order, monkeypatch, tmp_path):
    """The kernel's own head mapping written wrong. KV where GROUP belongs leaves some query heads written by two
    programs and others by none, so no suspect matches the whole result: the check tells, head by head, which kv
    head each one read, in place of the generic hint (after the report of the programs that overwrite each other).
    Which heads it names depends on the case that fails first (CPU and GPU cases differ), and on which program
    stores last: with the programs in another order (utils.order, as a GPU may run them) a head two of them write
    can keep the right kv head's result, and the heads no program writes tell the mapping instead."""
    plant(monkeypatch, tmp_path, L, "decode_attention_kernel", edit)
    with pytest.raises(AssertionError, match=words) as failure, programs_in_order(order):
        L.check_decode_attention(L.decode_attention, quiet=True)
    assert "Wrong values in many places" not in str(failure.value)


_Q1, _Q2 = "(q1 * c - q2 * s)", "(q2 * c + q1 * s)"
_K1, _K2 = "(k1 * c - k2 * s)", "(k2 * c + k1 * s)"
_INTERLEAVED = [  # Meta's layout: adjacent elements 2i and 2i + 1 turn by angle i, loaded and stored so
    ("q1 = tl.load(src + heads * HEAD_DIM + half,", "q1 = tl.load(src + heads * HEAD_DIM + 2 * half,"),
    ("q2 = tl.load(src + heads * HEAD_DIM + HEAD_DIM // 2 + half,",
     "q2 = tl.load(src + heads * HEAD_DIM + 2 * half + 1,"),
    ("heads * HEAD_DIM + half\n", "heads * HEAD_DIM + 2 * half\n"),  # dst
    ("tl.store(dst + HEAD_DIM // 2,", "tl.store(dst + 1,"),
    ("k1 = tl.load(k_src,", "k1 = tl.load(k_src + half,"),
    ("k2 = tl.load(k_src + HEAD_DIM // 2,", "k2 = tl.load(k_src + half + 1,"),
    ("tl.store(k_cache_ptr + row + HEAD_DIM // 2,", "tl.store(k_cache_ptr + row + half + 1,"),  # row holds + half
    ("tl.store(k_cache_ptr + row,", "tl.store(k_cache_ptr + row + half,"),
]  # fmt: skip
_SCALE = "scale = tl.exp2(m - tl.max(m, 0))"
KV_PLANTED = {  # mistake: (function, its edits, the check, words of its hint)
    "q and k turned the wrong way": (
        "rope_kv_write_kernel",
        [
            (_Q1, _Q1.replace("-", "+")),
            (_Q2, _Q2.replace("+", "-")),
            (_K1, _K1.replace("-", "+")),
            (_K2, _K2.replace("+", "-")),
        ],
        "rope",
        "turns the wrong way",
    ),  # fmt: skip
    "cos and sin swapped": (
        "rope_kv_write_kernel",
        [("c = tl.load(cos_ptr", "c = tl.load(sin_ptr"), ("s = tl.load(sin_ptr", "s = tl.load(cos_ptr")],
        "rope",
        "cos and sin swapped",
    ),  # fmt: skip
    "adjacent pairs": ("rope_kv_write_kernel", _INTERLEAVED, "rope", "the wrong pairs"),
    "every sequence at sequence 0's position": (
        "rope_kv_write_kernel",
        [("tl.load(pos_ptr + b)", "tl.load(pos_ptr)")],
        "rope",
        "sequence 0's position",
    ),  # fmt: skip
    "padding kv heads stored": (
        "rope_kv_write_kernel",
        [("write = (kv < KV) & inside", "write = inside")],
        "rope",
        "the padding heads",
    ),  # fmt: skip
    "every sequence with sequence 0's length": (
        "decode_attention_kernel",
        [("tl.load(lengths_ptr + b)", "tl.load(lengths_ptr)")],
        "attn",
        "sequence 0's length",
    ),  # fmt: skip
    "partials normalised in the first kernel": (
        "decode_attention_kernel",
        [("d[None, :], acc, mask", "d[None, :], acc / l_i[:, None], mask")],
        "attn",
        "divided its acc by its l_i",
    ),  # fmt: skip
    "keys read HEAD_DIM apart": (
        "decode_attention_kernel",
        [("cols[:, None].to(tl.int64) * stride_ct", "cols[:, None].to(tl.int64) * HEAD_DIM")],
        "attn",
        "read HEAD_DIM apart",
    ),  # fmt: skip
    "combine with tl.exp": (
        "decode_combine_kernel",
        [(_SCALE, _SCALE.replace("exp2", "exp"))],
        "attn",
        "tl.exp on the splits' maxima",
    ),  # fmt: skip
    "combine with l not rescaled": (
        "decode_combine_kernel",
        [("/ tl.sum(l_s * scale, 0)", "/ tl.sum(l_s, 0)")],
        "attn",
        "rescaled acc but not l",
    ),  # fmt: skip
    "combine with masked splits' m of 0": (
        "decode_combine_kernel",
        [('mask=mask, other=float("-inf"))', "mask=mask, other=0.0)")],
        "attn",
        "loaded with other=-inf, not 0",
    ),  # fmt: skip
    "combine weighed by split 0's max": (
        "decode_combine_kernel",
        [(_SCALE, "scale = tl.exp2(m - tl.load(m_ptr + bh * n_splits))")],
        "attn",
        "the max of the splits' m_i",
    ),  # fmt: skip
    # session 35: the first three got a hint about row offsets (alpha) or "Wrong values in many places"
    "alpha with tl.exp in base 2": (
        "decode_attention_kernel",
        [("alpha = tl.exp2(", "alpha = tl.exp(")],
        "attn",
        "alpha is computed with tl.exp, p with tl.exp2",
    ),  # fmt: skip
    "p with tl.exp in base 2": (
        "decode_attention_kernel",
        [("p = tl.exp2(", "p = tl.exp(")],
        "attn",
        "p is computed with tl.exp, alpha with tl.exp2",
    ),  # fmt: skip
    "scores not scaled": (
        "decode_attention_kernel",
        [(") * qk_scale  #", ")  #")],
        "attn",
        "The scores were not scaled: multiply q k^T by qk_scale",
    ),  # fmt: skip
    # session 35: both got "Wrong values in many places"; the first case's length (37 of 40, 777 of 1000 on a GPU)
    # is below max_len and not a multiple of BLOCK_N, so each reads the one key at position length
    "length one too long": (
        "decode_attention_kernel",
        [("tl.minimum(tl.load(lengths_ptr + b), max_len)", "tl.load(lengths_ptr + b) + 1")],
        "attn",
        "One key past the sequence's length was read",
    ),  # fmt: skip
    "keys masked with cols <= end": (
        "decode_attention_kernel",
        [("keep = cols < end", "keep = cols <= end")],
        "attn",
        "One key past the sequence's length was read",
    ),  # fmt: skip
    # session 35: got "Wrong values in many places"; the first case has 2 splits, none empty (BLOCK_S = 2: no lane
    # masked), so its rows are numbers, not the NaN of an empty split's inf * 0
    "combine with the rescale's sign flipped": (
        "decode_combine_kernel",
        [(_SCALE, "scale = tl.exp2(tl.max(m, 0) - m)")],
        "attn",
        "rescale has its sign flipped",
    ),  # fmt: skip
    "combine weighing acc_i / l_i by w_i alone": (
        "decode_combine_kernel",
        [
            (
                "o = tl.sum(acc * scale[:, None], 0) / tl.sum(l_s * scale, 0)",
                "o = tl.sum(acc / l_s[:, None] * scale[:, None], 0) / tl.sum(scale, 0)",
            )
        ],
        "attn",
        "by w_i = exp2(m_i - m) alone",
    ),  # fmt: skip
    # (session 36) from utils.mutants: the first two got "Only dim 0 indices ≥ 1 ... the stride of dim 0" and "Wrong
    # values in many places"; the third passed (every position of the main cases is 1 .. max_len - 2)
    "the sequence's cache found with the position stride": (
        "decode_attention_kernel",
        [("base = b.to(tl.int64) * stride_cb", "base = b.to(tl.int64) * stride_ct")],
        "attn",
        "Sequence b's cache was found at b * stride_ct",
    ),  # fmt: skip
    "the keys not transposed": (
        "decode_attention_kernel",
        [("tl.dot(q, tl.trans(k), ", "tl.dot(q, k, ")],
        "attn",
        "The keys were not transposed",
    ),  # fmt: skip
    "position 0 taken for outside the cache": (
        "rope_kv_write_kernel",
        [("inside = (pos >= 0)", "inside = (pos > 0)")],
        "rope",
        "Position 0 was taken for outside the cache",
    ),  # fmt: skip
}
KV_PLANTED.update(
    {  # (session 53, held-out battery) the first two passed, the third got the combine's hint (other=-inf)
        "the last row taken for outside the cache": (
            "rope_kv_write_kernel",
            [("(pos < max_len)", "(pos < max_len - 1)")],
            "rope",
            "Position max_len - 1, the cache's last row, was taken for outside the cache",
        ),
        "the running max taken from the block alone": (
            "decode_attention_kernel",
            [("m_new = tl.maximum(m_i, tl.max(s, 1))", "m_new = tl.max(s, 1)")],
            "attn",
            "m_new = tl.maximum(m_i, tl.max(s, 1))",
        ),
        "the running max starting at 0": (
            "decode_attention_kernel",
            [('m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)', "m_i = tl.zeros([BLOCK_H], tl.float32)")],
            "attn",
            "the first kernel's running max starts at 0",
        ),
        # (session 53) "Wrong values in many places", or a wrong lead (in brackets)
        "q2 loaded from the first half": (
            "rope_kv_write_kernel",
            [("HEAD_DIM + HEAD_DIM // 2 + half,", "HEAD_DIM + half,")],
            "rope",
            "q2 was loaded from the first half of the head",
        ),
        "k2 loaded from the first half": (
            "rope_kv_write_kernel",
            [("k2 = tl.load(k_src + HEAD_DIM // 2,", "k2 = tl.load(k_src,")],
            "rope",
            "k2 was loaded from the first half of the head",
        ),
        "q's second half turned the wrong way (the column tail is not masked)": (
            "rope_kv_write_kernel",
            [(_Q2, _Q2.replace("+", "-"))],
            "rope",
            "q's second half turns the wrong way",
        ),
        "the angles read at pos * (HEAD_DIM // 2)": (
            "rope_kv_write_kernel",
            [
                ("cos_ptr + pos * HEAD_DIM", "cos_ptr + pos * (HEAD_DIM // 2)"),
                ("sin_ptr + pos * HEAD_DIM", "sin_ptr + pos * (HEAD_DIM // 2)"),
            ],
            "rope",
            "The angles were read at pos * (HEAD_DIM // 2)",
        ),  # fmt: skip
        "k and v stored into each other's cache": (
            "rope_kv_write_kernel",
            [
                ("tl.store(k_cache_ptr + row,", "tl.store(V_CACHE + row,"),
                ("tl.store(k_cache_ptr + row + HEAD_DIM // 2,", "tl.store(V_CACHE + row + HEAD_DIM // 2,"),
                ("tl.store(v_cache_ptr + row", "tl.store(k_cache_ptr + row"),
                ("V_CACHE", "v_cache_ptr"),
            ],
            "rope",
            "k and v went to each other's cache",
        ),  # fmt: skip
        "v's second half never stored": (
            "rope_kv_write_kernel",
            [
                (
                    "    tl.store(v_cache_ptr + row + HEAD_DIM // 2,",
                    "    0 and tl.store(v_cache_ptr + row + HEAD_DIM // 2,",
                )
            ],
            "rope",
            "v's second half was never stored",
        ),
        "the cache offset without kv_h (query heads read kv head 0)": (
            "decode_attention_kernel",
            [("base = b.to(tl.int64) * stride_cb + kv_h * HEAD_DIM", "base = b.to(tl.int64) * stride_cb")],
            "attn",
            "cache offset lacks + kv_h * HEAD_DIM",
        ),
        "alpha's sign flipped (every output NaN)": (
            "decode_attention_kernel",
            [("alpha = tl.exp2(m_i - m_new)", "alpha = tl.exp2(m_new - m_i)")],
            "attn",
            "alpha = exp2(m_i - m_new), the old max minus the new",
        ),
        "m_i never updated (every output NaN)": (
            "decode_attention_kernel",
            [("        m_i = m_new\n", "")],
            "attn",
            "m_i = m_new ends each step",
        ),
    }
)
KV_CHECKS = {"rope": (L.check_rope_kv_write, L.rope_kv_write), "attn": (L.check_decode_attention, L.decode_attention)}


@pytest.mark.parametrize("mistake", list(KV_PLANTED))
def test_planted_mistakes_get_their_hint(mistake, monkeypatch, tmp_path):
    """Each fails its check with the hint that names it, not "Wrong values in many places" or a passing check.
    The last two pass every case of random scores (the max they subtract only shifts the weights): they fail where
    the scores lie far below 0 and split 0 far below the others (_check_far_scores)."""
    name, edits, check, words = KV_PLANTED[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    fn, launcher = KV_CHECKS[check]
    with pytest.raises(AssertionError, match=re.escape(words)) as failure:
        fn(launcher, quiet=True)
    assert "Wrong values in many places" not in str(failure.value)


def test_cache_strides_swapped_are_told_as_offsets_not_a_missing_mask(monkeypatch, tmp_path):
    """(session 53) rope_kv_write's cache row at b * stride_ct + pos * stride_cb: q is right and the k and v stores
    land past the caches, which was told only as "every tl.store needs a mask that keeps it inside its own tensor",
    stores masked already."""
    plant(monkeypatch, tmp_path, L, "rope_kv_write_kernel",
          ("row = b * stride_cb + pos * stride_ct", "row = b * stride_ct + pos * stride_cb"))  # fmt: skip
    torch.manual_seed(0)  # positions that send the first case's rows past the caches
    with pytest.raises(AssertionError, match="writes .* past the end of `[kv]_cache_ptr`") as failure:
        L.check_rope_kv_write(L.rope_kv_write, quiet=True)
    assert "their offsets are the likelier mistake" in str(failure.value), failure.value


def test_partials_normalised_with_a_split_past_the_length_get_their_hint(monkeypatch, tmp_path):
    """The first kernel dividing acc by l_i, where a split has no key: 0 / 0 there makes every row NaN (on an H100
    the first case has 16 splits of 64 keys for a length of 777 of 1000), which the all-NaN hint took before. The
    first case here leaves split 1 empty (CPU and GPU), the second leaves it empty for sequences 0 and 1 only: the
    suspect reproduces the NaN, and the all-NaN case waits for the one that tells the mistake."""
    plant(monkeypatch, tmp_path, L, "decode_attention_kernel",
          ("d[None, :], acc, mask", "d[None, :], acc / l_i[:, None], mask"))  # fmt: skip
    cases = [(1, 8, 2, 16, 80, [37]), (3, 4, 1, 32, 70, [1, 50, 70])]  # (B, H, KV, D, max_len, lengths)
    split_len = L.decode_split(1, 2, 80, head_dim=16)[1]
    assert -(-37 // split_len) * split_len < 80, "the first case must leave a split with no key"
    with pytest.raises(AssertionError, match=r"(?s)every output NaN.*a later case tells which.*divided its acc by"):
        L.check_decode_attention(L.decode_attention, cases=cases, quiet=True)
    with pytest.raises(AssertionError) as failure:  # the all-NaN case alone: nothing tells the mistake apart
        L.check_decode_attention(L.decode_attention, cases=cases[:1], quiet=True)
    assert "Whole rows are NaN" in str(failure.value) and "divided its acc" not in str(failure.value)


@pytest.mark.parametrize(
    "combine, words",
    [
        ("o = tl.sum(acc / l_s[:, None] * scale[:, None], 0) / tl.sum(scale, 0)", "by w_i = exp2(m_i - m) alone, and"),
        ("o = tl.sum(acc / l_s[:, None], 0) / tl.sum((l_s > 0).to(tl.float32), 0)", "averaged each split's own result"),
    ],
    ids=["weighed by w_i alone", "averaged"],
)
def test_a_combine_dividing_by_an_empty_splits_l_gets_its_hint(combine, words, monkeypatch, tmp_path):
    """(session 40) The combine dividing each split's acc by its l_i: on the H200 the check's first case (one
    sequence of 17 keys, many splits) was NaN everywhere, and the later case NaN in the three sequences with a split
    past their length, which the all-NaN hint took: the suspect had put 0 for 0 / 0. Its unguarded twin keeps the
    NaN. Here the first case leaves split 1 empty, the second only sequences 0 and 1 (as in the test above)."""
    old = "o = tl.sum(acc * scale[:, None], 0) / tl.sum(l_s * scale, 0)"
    plant(monkeypatch, tmp_path, L, "decode_combine_kernel", (old, combine))
    cases = [(1, 8, 2, 16, 80, [37]), (3, 4, 1, 32, 70, [1, 50, 70])]  # (B, H, KV, D, max_len, lengths)
    with pytest.raises(AssertionError, match=r"(?s)every output NaN.*a later case tells which.*" + re.escape(words)):
        L.check_decode_attention(L.decode_attention, cases=cases, quiet=True)


def test_an_output_nan_in_every_case_gets_the_first_cases_report():
    """A case that is NaN everywhere waits for a later one only to be told apart; NaN in every case is reported as the
    first case found it, not swallowed."""

    def all_nan(q, k_cache, v_cache, lengths, *, out=None):
        return out.fill_(float("nan"))

    with pytest.raises(AssertionError) as failure:
        L.check_decode_attention(all_nan, quiet=True)
    message = str(failure.value)
    assert message.startswith("decode attention (B=1,") and "NaN that the kernel computed" in message, message
    assert "a later case" not in message, message


def _heads_at_b_times_kv_on_a_gpu(seed):
    """decode_attention with heads = b * KV + kv_h * GROUP + rows, as a GPU runs it: the programs store their partials
    in any order (under the interpreter the last program's stay), over partials that start as torch.empty's garbage,
    NaN among it, where no program writes. A torch stand-in for the planted kernel; the combine is the lesson's."""

    def fn(q, k_cache, v_cache, lengths, *, out=None):
        B, H, D = q.shape
        max_len, KV = k_cache.shape[1:3]
        GROUP = H // KV
        n_splits, split_len, _ = L.decode_split(B, KV, max_len, head_dim=D)
        g = torch.Generator().manual_seed(seed)
        acc = torch.randn(B * H, n_splits, D, generator=g, dtype=torch.float64)
        m, l_ = (torch.randn(B * H, n_splits, generator=g, dtype=torch.float64) for _ in range(2))
        acc.view(-1)[::97] = float("nan")
        programs = list(itertools.product(range(B), range(KV), range(n_splits)))
        flat_q = q.reshape(B * H, D)
        for i in torch.randperm(len(programs), generator=g).tolist():
            b, kv_h, split = programs[i]
            rows = b * KV + kv_h * GROUP + torch.arange(GROUP)  # the mistake: b * KV, not b * KV * GROUP
            kv = slice(kv_h, kv_h + 1)
            a, m_b, l_b = L._split_partials_ref(flat_q[rows.to(q.device)][None], k_cache[b : b + 1, :, kv],
                                                v_cache[b : b + 1, :, kv], lengths[b : b + 1], split_len)  # fmt: skip
            acc[rows, split] = a[0, :, split]  # one store each, as the kernel's three tl.store
            m[rows, split] = m_b[0, :, split] * L.LOG2E  # the kernel's m is in base 2
            l_[rows, split] = l_b[0, :, split]
        partials = (acc.view(B, H, n_splits, D), m.view(B, H, n_splits), l_.view(B, H, n_splits))
        return L.decode_combine(*(t.float().to(q.device) for t in partials), out=out)

    return fn


@pytest.mark.parametrize("seed", range(3))
def test_a_sequence_offset_of_b_times_kv_is_named_whatever_order_the_programs_store_in(seed):
    """On an H100 the planted "sequence offset b * KV" got the NaN hint: rows that two programs write mixed their
    splits (neither program's attention), and the rows no program writes were garbage, some of it NaN. Rows written
    by several programs are left out now; those written by one must match it (and the kv-head diagnosis, which such
    a row can fool, comes second). The GPU's second case is the one that failed there."""
    for cases in (None, [(3, 9, 3, 64, 300, [1, 200, 300])]):
        with pytest.raises(AssertionError) as failure:
            L.check_decode_attention(_heads_at_b_times_kv_on_a_gpu(seed), cases=cases, quiet=True)
        message = str(failure.value)
        assert "Sequence b > 0 read and wrote other sequences' rows" in message, message
        assert "by several, the last to store winning" in message, message


# -- sampling ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_argmax_kernel_is_torchs(dtype):
    """The greedy pick's kernel returns torch.argmax's index at every shape: ties (the first maximum), NaN (above
    every number), rows of -inf, one column, rows longer than one block, strided rows."""
    torch.manual_seed(0)
    V_long = L.ARGMAX_BLOCK * 2 + 37 if ENV.interpret else 128256
    for B, V in ((1, 1), (3, 5), (2, L.ARGMAX_BLOCK), (5, V_long)):
        x = torch.randn(B, V, device=ENV.device).to(dtype)
        ties = torch.randint(0, 3, (B, V), device=ENV.device).to(dtype)  # many equal maxima a row
        cases = [x, ties, torch.full((B, V), float("-inf"), device=ENV.device, dtype=dtype)]
        if V > 3:
            nan = x.clone()
            nan[:, 0] = float("inf")
            nan[:, V // 2] = float("nan")
            nan[:, -1] = float("nan")
            cases.append(nan)
        for logits in cases:
            want = logits.argmax(-1)
            out = torch.full((B,), -7, device=ENV.device, dtype=torch.int64)
            assert L.argmax(logits, out=out) is out
            assert torch.equal(out, want), f"B={B} V={V}: {out.tolist()} against torch's {want.tolist()}"
            # the decode step's NaN flag, set in the same launch: OR-ed into what the flag held (every other row set)
            was = torch.arange(B, device=ENV.device) % 2 == 1
            flag, out = was.clone(), torch.full((B,), -7, device=ENV.device, dtype=torch.int64)
            assert L.argmax(logits, out=out, nan=flag) is out and torch.equal(out, want)
            assert torch.equal(flag, was | logits.isnan().any(-1)), f"B={B} V={V}: the NaN flag {flag.tolist()}"
    wide = torch.randn(4, 2 * V_long, device=ENV.device).to(dtype)[:, ::2]  # rows of stride 2: refused
    with pytest.raises(ValueError, match="contiguous"):
        L.argmax(wide)
    rows = torch.randn(6, V_long, device=ENV.device).to(dtype)[::2]  # every other row: a row stride, allowed
    assert torch.equal(L.argmax(rows), rows.argmax(-1))


def test_argmax_refusals():
    with pytest.raises(ValueError, match="no columns"):
        L.argmax(torch.empty(2, 0, device=ENV.device))
    with pytest.raises(ValueError, match="must have 2 dimension"):
        L.argmax(torch.zeros(5, device=ENV.device))
    with pytest.raises(TypeError, match="int32.*float32"):
        L.argmax(torch.zeros(2, 3, device=ENV.device, dtype=torch.int32))
    with pytest.raises(TypeError, match="out has dtype int32.*int64"):
        L.argmax(torch.zeros(2, 3, device=ENV.device), out=torch.zeros(2, device=ENV.device, dtype=torch.int32))
    assert L.argmax(torch.zeros(0, 3, device=ENV.device)).shape == (0,)
    x = torch.zeros(2, 3, device=ENV.device)
    with pytest.raises(TypeError, match="nan has dtype uint8.*bool"):
        L.argmax(x, nan=torch.zeros(2, device=ENV.device, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"nan .*\(2,\)"):
        L.argmax(x, nan=torch.zeros(3, device=ENV.device, dtype=torch.bool))


def test_sampling_with_the_argmax_kernel():
    """sample() with the decode step's argmax: greedy is torch's index, and the exponential race still draws
    tokens as often as softmax(logits / T) says."""
    torch.manual_seed(0)
    logits = torch.randn(300, 10, device=ENV.device)
    assert torch.equal(L.sample(logits, argmax=L.argmax), logits.argmax(-1))
    row = torch.tensor([[2.0, 1.0, 0.0, -1.0]], device=ENV.device).expand(2000 if ENV.interpret else 20000, 4)
    freq = torch.bincount(L.sample(row, temperature=1.0, argmax=L.argmax), minlength=4).double().cpu() / len(row)
    want = row[0].double().cpu().softmax(-1)
    assert (freq - want).abs().max() < (0.04 if ENV.interpret else 0.015), f"frequencies {freq} vs softmax {want}"


def test_sampling():
    torch.manual_seed(0)
    logits = torch.randn(4000, 10, device=ENV.device)
    best = logits.argmax(-1)
    assert torch.equal(L.sample(logits), best)
    assert torch.equal(L.sample(logits, temperature=1.0, top_k=1), best)
    assert torch.equal(L.sample(logits, temperature=1.0, top_p=1e-6), best)
    top3 = torch.topk(logits, 3, dim=-1).indices
    drawn = L.sample(logits, temperature=1.0, top_k=3)
    assert bool((top3 == drawn[:, None]).any(-1).all()), "top_k=3 drew a token outside the top 3"
    # one row, many draws: the frequencies follow softmax(logits / T)
    row = torch.tensor([[2.0, 1.0, 0.0, -1.0]], device=ENV.device).expand(20000, 4)
    for temperature in (0.5, 1.0):
        freq = torch.bincount(L.sample(row, temperature=temperature), minlength=4).double().cpu() / len(row)
        want = (row[0].double().cpu() / temperature).softmax(-1)
        assert (freq - want).abs().max() < 0.015, f"T={temperature}: frequencies {freq} vs softmax {want}"
    # (session 53) top_k=3: the three most likely tokens at their share of the softmax, the fourth never. The subset
    # test above passed a top_k that kept the most likely token alone (kth = topk(...).values[:, :1])
    freq = torch.bincount(L.sample(row, temperature=1.0, top_k=3), minlength=4).double().cpu() / len(row)
    want = torch.cat([row[0, :3].double().cpu().softmax(-1), torch.zeros(1, dtype=torch.float64)])
    assert (freq - want).abs().max() < 0.015, f"top_k=3: frequencies {freq} vs the top 3's softmax {want}"
    # top_p: with probabilities ~(0.64, 0.24, 0.09, 0.03), top_p=0.8 keeps the first two
    drawn = L.sample(row, temperature=1.0, top_p=0.8)
    assert set(drawn.tolist()) == {0, 1}


def test_a_tiny_temperature_samples_the_argmax():
    """logits / 1e-40 overflowed to inf wherever a logit was positive, and the softmax of infs is NaN: the draw then
    took token 0 (a NaN's place), whatever the logits, through torch's argmax and the kernel alike."""
    logits = torch.tensor([[1.0, 3.0, 2.0, -1.0], [5.0, 4.0, 6.0, 0.0], [-3.0, -2.0, -5.0, -4.0]], device=ENV.device)
    for temperature in (1e-40, 1e-300):
        for argmax in (None, L.argmax):
            assert L.sample(logits, temperature=temperature, argmax=argmax).tolist() == [1, 2, 1]


def test_infinite_logits_are_sampled_as_the_argmax_picks_them():
    """(probe08) A +inf logit (a token forced on, or fp16 logits that overflowed) is the argmax, and at any temperature
    every draw: inf - max was NaN, every probability NaN, and the draw gave token 0 whatever the logits. A temperature
    so large that 1 / T rounds to 0 in fp32 turned the -inf of a token masked off into NaN (-inf * 0) the same way."""
    inf = float("inf")
    rows = torch.tensor([[0.0, inf, 1.0, 2.0], [inf, 3.0, 1.0, inf], [-inf, 0.0, -inf, 1.0]], device=ENV.device)
    logits = rows.repeat_interleave(200, dim=0)  # 200 draws of each row
    for argmax in (None, L.argmax):
        for settings in ({"temperature": 1.0}, {"temperature": 1.0, "top_k": 2}, {"temperature": 1.0, "top_p": 0.9},
                         {"temperature": 1e300}):  # fmt: skip
            drawn = L.sample(logits, **settings, argmax=argmax).view(3, 200).cpu()
            assert set(drawn[0].tolist()) == {1}, f"{settings}: the +inf token must be drawn, got {drawn[0, :8]}"
            assert set(drawn[1].tolist()) == {0, 3}, f"{settings}: two +inf tokens share the draws: {drawn[1, :8]}"
            assert set(drawn[2].tolist()) == {1, 3}, f"{settings}: -inf tokens are never drawn: {drawn[2, :8]}"


def _nan_logit(real, b, at):
    """real (decode_step, or prefill: its last position) with one logit of sequence b NaN where the step's positions
    ``at`` hold: a torch.where on the GPU, so that a CUDA graph of the decode step carries it too."""

    def stepped(model, tokens, *args, **kwargs):
        logits = real(model, tokens, *args, **kwargs)
        pos = args[0] if tokens.dim() == 1 else torch.full_like(tokens[:, 0], tokens.shape[1] - 1)
        hit = at(pos) & (torch.arange(len(pos), device=pos.device) == b)
        logits[:, 3] = torch.where(hit, float("nan"), logits[:, 3])
        return logits

    return stepped


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.7, "top_k": 5, "top_p": 0.9}], ids=["greedy", "sampled"])
def test_nan_logits_are_told_once_generate_ends(tied, monkeypatch, sampling):
    """(session 52) One NaN logit of sequence 1 at one decode step (at position 7; on a GPU inside the graphed step):
    greedy drew the NaN's index (3) and a temperature drew token 0 (every probability NaN), silently. A flag that the
    step sets on the GPU, read once after the last step, makes generate warn (NaNLogitsWarning, shown every time),
    naming the sequence; a NaN in prefill's logits too. The same loop called again without a NaN gives the tokens it
    gave before, and no warning."""
    model = dataclasses.replace(tied[0], decoders={})  # loops of its own: a graph here carries the NaN
    ids = prompt(B=2, T=5)
    torch.manual_seed(0)
    clean = L.generate(model, ids, 4, **sampling)
    decode_step, prefill = L.decode_step, L.prefill
    monkeypatch.setattr(L, "decode_step", _nan_logit(decode_step, 1, lambda pos: pos == 7))
    model.decoders.clear()
    for _ in range(2):  # every call told, not once per line as Python's default filter would
        with pytest.warns(L.NaNLogitsWarning, match=r"sequence\(s\) \[1\] held a NaN at some step.*not the model's"):
            L.generate(model, ids, 4, **sampling)
    monkeypatch.setattr(L, "decode_step", decode_step)
    model.decoders.clear()
    monkeypatch.setattr(L, "prefill", _nan_logit(prefill, 0, lambda pos: pos >= 0))
    with pytest.warns(L.NaNLogitsWarning, match=r"sequence\(s\) \[0\] held a NaN"):
        L.generate(model, ids, 4, **sampling)
    monkeypatch.setattr(L, "prefill", prefill)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", L.NaNLogitsWarning)  # the flag starts again at each call
        assert torch.equal(L.generate(model, ids, 4, **sampling), clean)


def test_sample_refuses_logits_that_are_not_one_row_per_sequence():
    """(probe08) logits (V,) drew a 0-d token (greedy) or failed inside topk; (B, T, V) failed on a broadcast;
    (B, 0) inside amax: each is told as a shape, with the fix."""
    d = ENV.device
    utils.refuses(
        {
            "one sequence's (V,)": lambda: L.sample(torch.randn(5, device=d), temperature=1.0, top_k=2),
            "a greedy (V,)": lambda: L.sample(torch.randn(5, device=d)),
            "all_logits (B, T, V)": lambda: L.sample(torch.randn(2, 3, 5, device=d), temperature=1.0),
            "no column": lambda: L.sample(torch.empty(2, 0, device=d), temperature=1.0),
        },
        quiet=True,
    )
    with pytest.raises(ValueError, match=r"logits must be \(B, V\).*logits\[None\]"):
        L.sample(torch.randn(5, device=d))


# -- refusals -----------------------------------------------------------------------------------------------------


def test_loader_refusals(tmp_path, tied):
    folder = ckpt.build_checkpoint(tmp_path / "ok")
    config = json.loads((folder / "config.json").read_text())
    state = L.load_state_dict(folder)
    args = L.model_args(config)
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text(json.dumps(config))
    sharded = ckpt.build_checkpoint(tmp_path / "sharded", shards=2)
    next(sharded.glob("model-00002-*.safetensors")).unlink()
    cases = {
        "no config.json": (lambda: L.load_model(tmp_path), "no config.json"),
        "no weights": (lambda: L.load_model(no_weights), "neither model.safetensors"),
        "a missing shard": (lambda: L.load_model(sharded), "one of the shards"),
        "no tokenizer.json": (lambda: L.load_tokenizer(no_weights), "no tokenizer.json"),
        "another architecture": (
            lambda: L.model_args({**config, "model_type": "mistral", "architectures": ["MistralForCausalLM"]}),
            "Llama models only",
        ),
        "a missing tensor": (
            lambda: L.model_from_state_dict(args, {k: v for k, v in state.items() if "layers.1.mlp.up" not in k}),
            "no tensor 'model.layers.1.mlp.up_proj.weight'",
        ),
        "a mismatched shape": (
            lambda: L.model_from_state_dict(L.model_args({**config, "intermediate_size": 128}), state),
            r"has shape \(96, 64\) but config.json implies \(128, 64\)",
        ),
        "an unsupported RoPE": (
            lambda: L.model_args({**config, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
            "'yarn' is not implemented",
        ),
        "biases": (lambda: L.model_args({**config, "attention_bias": True}), "sets attention_bias: this model"),
        "heads that do not split hidden_size, no head_dim": (
            lambda: L.model_args({**config, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": None}),
            "does not split over 6 heads and config.json sets no head_dim",
        ),
        "an incomplete config": (lambda: L.model_args({"model_type": "llama"}), "has no vocab_size"),
        "llama3 RoPE without its fields": (
            lambda: L.model_args({**config, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),
            "needs low_freq_factor, high_freq_factor, original_max_position_embeddings",
        ),
        "linear RoPE without a factor": (
            lambda: L.model_args({**config, "rope_scaling": {"rope_type": "linear"}}),
            "'linear' needs factor",
        ),
        "a RoPE base of 0": (lambda: L.model_args({**config, "rope_theta": 0}), "rope_theta is 0.0"),
        "MLP biases": (lambda: L.model_args({**config, "mlp_bias": True}), "sets mlp_bias: this model's projections"),
        "heads that do not group": (
            lambda: L.model_args({**config, "num_key_value_heads": 3}),
            "num_attention_heads 4 does not split evenly over num_key_value_heads 3",
        ),
        "an untied config without lm_head.weight": (
            lambda: L.model_from_state_dict(L.model_args({**config, "tie_word_embeddings": False}), state),
            "tie_word_embeddings is false .* lacks",
        ),
        "heads wider than the kernels take": (
            lambda: L.model_args({**config, "head_dim": 160}),
            "head_dim 160: the kernels .* take heads up to 128 wide",
        ),
    }
    for call, message in cases.values():
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            call()


def test_tensors_the_model_does_not_read_are_refused(tmp_path):
    """A bias (Qwen2's q_proj.bias), a layer past num_hidden_layers, a tied config's lm_head of its own: each used to
    be dropped without a word (the logits then silently not the checkpoint's; transformers keeps such a head apart).
    The rotary buffers older checkpoints store, and a head that is the embeddings' copy, are still read."""
    folder = ckpt.build_checkpoint(tmp_path)
    args, state = L.model_args(json.loads((folder / "config.json").read_text())), L.load_state_dict(folder)
    layer_2 = {k.replace("layers.1.", "layers.2."): v for k, v in state.items() if "layers.1." in k}
    for extra, message in (
        ({"model.layers.0.self_attn.q_proj.bias": torch.zeros(64)}, r"1 tensor\(s\) .* \(model\.layers\.0\.self_attn"),
        (layer_2, r"9 tensor\(s\) .*num_hidden_layers=2"),
        ({"lm_head.weight": torch.randn(320, 64)}, "lm_head.weight differs .* set tie_word_embeddings false"),
    ):
        with pytest.raises(ValueError, match=message):
            L.model_from_state_dict(args, {**state, **extra})
    copies = {"lm_head.weight": state["model.embed_tokens.weight"].clone(),
              "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(8)}  # fmt: skip
    assert L.model_from_state_dict(args, {**state, **copies}).lm_head.shape == (320, 64)


def test_config_numbers_are_refused_by_name(tmp_path):
    """A RoPE factor of 0 made every frequency inf (NaN logits, silently), a negative one turned RoPE backwards, a
    string raised Python's own errors far from config.json; now each is refused naming its field."""
    config = json.loads((ckpt.build_checkpoint(tmp_path) / "config.json").read_text())
    for fields, error, message in (
        ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, ValueError, "rope_scaling factor must be positive"),
        ({"rope_scaling": {"rope_type": "linear", "factor": -2.0}}, ValueError, "factor must be positive, got -2"),
        ({"rope_scaling": {**LLAMA3, "original_max_position_embeddings": 0}}, ValueError,
         "original_max_position_embeddings must be positive"),
        ({"rope_scaling": {"rope_type": "linear", "factor": None}}, TypeError, "factor must be a real number"),
        ({"rms_norm_eps": "1e-5"}, TypeError, "config.json's rms_norm_eps must be a real number"),
        ({"rope_theta": "x"}, TypeError, "config.json's rope_theta must be a real number"),
        # session 35: 0 was read as "absent" (one key/value head per query head), -2 refused as LlamaArgs.n_kv_heads
        ({"num_key_value_heads": 0}, ValueError, "config.json's num_key_value_heads must be a positive int, got 0"),
        ({"num_key_value_heads": -2}, ValueError, "config.json's num_key_value_heads must be a positive int"),
        # session 52: refused as "LlamaArgs.norm_eps must be >= 0", a name config.json does not use
        ({"rms_norm_eps": -1e-5}, ValueError, r"config.json's rms_norm_eps must be >= 0 \(it keeps the square root "
                                              r"away from 0\), got -1e-05"),
    ):  # fmt: skip
        with pytest.raises(error, match=message):
            L.model_args({**config, **fields})


def test_config_sizes_are_refused_by_their_config_names(tmp_path):
    """(session 36) A size that is not a positive int was refused as LlamaArgs.dim or ModelArgs.n_layers (names
    config.json does not use); num_attention_heads 0 without a head_dim raised ZeroDivisionError; head_dim 16.0 or
    -16 was refused as "config.json sets no head_dim"; a rope_scaling that is not a dict raised dict()'s own error."""
    config = json.loads((ckpt.build_checkpoint(tmp_path) / "config.json").read_text())
    for fields, error, message in (
        ({"hidden_size": 64.0}, ValueError, "config.json's hidden_size must be a positive int, got 64.0"),
        ({"num_hidden_layers": 0}, ValueError, "config.json's num_hidden_layers must be a positive int, got 0"),
        ({"num_attention_heads": 0, "head_dim": None}, ValueError, "config.json's num_attention_heads must be a pos"),
        ({"intermediate_size": "96"}, ValueError, "config.json's intermediate_size must be a positive int"),
        ({"head_dim": 16.0}, ValueError, "config.json's head_dim must be a positive int, got 16.0"),
        ({"head_dim": -16}, ValueError, "config.json's head_dim must be a positive int, got -16"),
        ({"rope_scaling": "linear"}, TypeError, "config.json's rope_scaling is 'linear': a dict such as"),
        # session 37: rotated whole, silently, where transformers' Llama fails at its first step
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "partial_rotary_factor": 0.5}, ValueError,
         "partial_rotary_factor 0.5 with RoPE type 'linear'"),
        ({"rope_scaling": {**LLAMA3, "partial_rotary_factor": 0.25}}, ValueError,
         "partial_rotary_factor 0.25 with RoPE type 'llama3'"),
    ):  # fmt: skip
        with pytest.raises(error, match=message):
            L.model_args({**config, **fields})
    assert L.model_args({**config, "head_dim": 0}).head_dim == 16  # 0 as transformers reads it: hidden // heads
    # default RoPE: transformers' Llama rotates whole heads whatever partial_rotary_factor says, and so does this one
    assert L.model_args({**config, "partial_rotary_factor": 0.5}) == L.model_args(config)


def test_a_checkpoint_of_mixed_dtypes_and_an_index_without_its_map_are_refused(tmp_path):
    """Norms stored in fp16 beside fp32 projections, loaded as stored (dtype=None), used to reach the first rmsnorm
    launch ("norm has dtype float16, but this kernel takes float32"); an index without weight_map raised KeyError."""
    folder = ckpt.build_checkpoint(tmp_path / "ok")
    args, state = L.model_args(json.loads((folder / "config.json").read_text())), L.load_state_dict(folder)
    mixed = {name: t.half() if "norm" in name else t for name, t in state.items()}
    with pytest.raises(TypeError, match=r"input_layernorm\.weight is stored as float16 but .* as float32: pass dtype="):
        L.model_from_state_dict(args, mixed)
    assert L.model_from_state_dict(args, mixed, dtype=torch.float32).layers[0].attn_norm.dtype == torch.float32
    sharded = ckpt.build_checkpoint(tmp_path / "sharded", shards=2)
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match="has no weight_map"):
        L.load_model(sharded)


def test_load_model_refuses_a_device_the_kernels_do_not_run_on(tmp_path):
    """(session 53, held-out battery) device=0 was taken for None (`device or ...`), and 'meta' loaded a model of
    shapes without values that failed at its first kernel: each is refused by name before a weight is read; the
    device the kernels run on, named, is taken."""
    folder = ckpt.build_checkpoint(tmp_path / "ckpt")
    other = "cpu" if ENV.device == "cuda" else "cuda"
    refused = {"meta": "device='meta', but the kernels run on", other: f"device='{other}", "gpu": "must be a torch",
               1.5: "device must be a torch.device or its name"}  # fmt: skip
    for device, message in refused.items():
        with pytest.raises((ValueError, TypeError), match=message):
            L.load_model(folder, device=device)
    if ENV.device == "cpu":  # device 0: no device here (torch names the accelerator's by number), nor the default
        with pytest.raises((ValueError, TypeError), match=r"device.* got 0|device='cuda:0', but the kernels run on"):
            L.load_model(folder, device=0)
    else:
        assert L.load_model(folder, device=0, dtype=torch.float32).embed.device == torch.device("cuda", 0)
    model = L.load_model(folder, device=torch.device(ENV.device), dtype=torch.float32)
    assert model.embed.device.type == ENV.device


def test_generate_refusals(tied):
    model, _ = tied
    ids = prompt(B=1, T=3)
    cache = L.new_cache(model, 1, 4)
    cases = {
        "an empty prompt": (lambda: L.generate(model, ids[:, :0], 4), "the prompt is empty"),
        "a prompt longer than the cache": (lambda: L.prefill(model, prompt(B=1, T=5), cache), "cache holds 4"),
        "all_logits as a string (session 53)": (
            lambda: L.prefill(model, ids, cache, all_logits="no"),
            "all_logits must be True or False, got 'no'",
        ),
        "more tokens than max_len": (lambda: L.generate(model, ids, 4, max_len=5), "do not fit max_len=5"),
        "ids past the vocabulary": (lambda: L.generate(model, ids + 1000, 2), r"token ids must be in \[0, 320\)"),
        "a float prompt": (lambda: L.generate(model, ids.float(), 2), "dtype float32"),
        "zero new tokens": (lambda: L.generate(model, ids, 0), "positive int"),
        "a negative temperature": (lambda: L.generate(model, ids, 2, temperature=-1.0), "temperature"),
        "top_p of 0": (lambda: L.generate(model, ids, 2, temperature=1.0, top_p=0.0), "top_p"),
        "top_k of 0": (lambda: L.generate(model, ids, 2, temperature=1.0, top_k=0), "top_k"),
        "the wrong batch for the cache": (lambda: L.prefill(model, prompt(B=2, T=2), cache), "made for 1"),
        "a float max_len": (lambda: L.generate(model, ids, 2, max_len=10.5), "max_len must be a positive int"),
        "a float batch for a cache": (lambda: L.new_cache(model, 1.0, 8), "B must be a positive int"),
        "a float max_len for a cache": (lambda: L.new_cache(model, 1, 8.5), "max_len must be a positive int"),
        "a prompt that fills max_len": (lambda: L.generate(model, ids, 1, max_len=3), "leaves no room"),
        # session 35: kernels="no" ran the kernels (any object was truthy); a (0, T) prompt was refused as "B must be
        # a positive int", naming no prompt
        "kernels not a bool": (lambda: L.generate(model, ids, 2, kernels="no"), "kernels must be True or False"),
        "cuda_graph not a bool": (lambda: L.generate(model, ids, 2, cuda_graph=0), "cuda_graph must be True, False"),
        "a prompt of no sequence": (lambda: L.generate(model, ids[:0], 2), r"the prompt has shape \(0, 3\): no seq"),
        "a float token to decode_step": (
            lambda: L.decode_step(
                model, ids[:, 0].float(), torch.zeros(1, dtype=torch.int32, device=ENV.device), L.new_cache(model, 1, 8)
            ),
            "token has dtype float32",
        ),  # fmt: skip
    }
    if not ENV.is_gpu:
        cases["a CUDA graph on the CPU"] = (lambda: L.generate(model, ids, 2, cuda_graph=True), "needs a GPU")
    for call, message in cases.values():
        with pytest.raises((ValueError, TypeError), match=message):
            call()


def _never_launched(*args, **kwargs):
    raise AssertionError("a kernel of the step ran before its inputs were checked")


NO_LAUNCH = L.DecodeOps(*[_never_launched] * 7)


def test_decode_step_refuses_a_bad_position_before_any_launch(tied):
    """(session 53) decode_step checked its positions only at rope_kv_write, mid-step (after a norm's launch, with a
    list: "can only concatenate list (not "int") to list" from pos + 1). Now with the token, before any launch."""
    model, _ = tied
    token, cache = torch.tensor([1, 2], device=ENV.device), L.new_cache(model, 2, 8)
    pos = torch.tensor([3, 3], dtype=torch.int32, device=ENV.device)
    cases = {
        "int64 positions": (pos.long(), "pos has dtype int64"),
        "float positions": (pos.float(), "pos has dtype float32"),
        "a list": ([3, 3], "pos must be a torch.Tensor"),
        "one position for two tokens": (pos[:1], r"pos has shape \(1,\) but must be \(2,\)"),
        "a 0-d position": (pos[0], r"pos has shape \(\)"),
    }
    for what, (bad, message) in cases.items():
        with pytest.raises((ValueError, TypeError), match=message):
            L.decode_step(model, token, bad, cache, NO_LAUNCH)
            pytest.fail(f"{what}: not refused")
    with pytest.raises(AssertionError, match="a kernel of the step ran"):  # the good inputs reach the ops
        L.decode_step(model, token, pos, cache, NO_LAUNCH)


def test_sample_refuses_logits_that_are_not_floats():
    """(session 53) complex logits were drawn from by their real part at a temperature (a ComplexWarning at most) and
    crashed inside argmax when greedy; bool and integer logits were taken as scores; a sparse tensor crashed in
    PyTorch. Refused as "a dense float tensor", with the fix."""
    logits = torch.randn(2, 5, device=ENV.device)
    for bad in (logits.to(torch.complex64), logits > 0, logits.long(), logits.to_sparse()):
        for temperature in (0.0, 1.0):
            with pytest.raises(TypeError, match=r"logits must be a dense float tensor.*logits\.float\(\)"):
                L.sample(bad, temperature)
    assert torch.equal(L.sample(logits.half()), logits.half().argmax(-1))


def test_loading_refuses_weights_the_kernels_cannot_take(tmp_path):
    """An integer dtype used to be accepted (the weights cast to integers, the error only from a kernel later); a
    dtype's name gave a raw torch error. Weights stored as integers are quantized (their values mean something only
    with scales): refused whatever dtype asks for (dtype=torch.float32 used to cast them as they were)."""
    folder = ckpt.build_checkpoint(tmp_path / "ok")
    config, state = json.loads((folder / "config.json").read_text()), L.load_state_dict(folder)
    stored_in_int8 = {name: t.to(torch.int8) for name, t in state.items()}
    for call in (
        lambda: L.load_model(folder, dtype=torch.int64),
        lambda: L.load_model(folder, dtype="float32"),
        lambda: L.model_from_state_dict(L.model_args(config), state, dtype=torch.int32),
    ):
        with pytest.raises(TypeError, match="must be one of float32, float16, bfloat16"):
            call()
    for dtype in (None, torch.float32):
        with pytest.raises(TypeError, match=r"is stored as torch\.int8: quantized weights"):
            L.model_from_state_dict(L.model_args(config), stored_in_int8, dtype=dtype)
    stored_in_fp64 = {name: t.double() for name, t in state.items()}  # wider floats cast down, as asked
    assert L.model_from_state_dict(L.model_args(config), stored_in_fp64, dtype=torch.float32).embed.is_floating_point()


@pytest.mark.skipif(ENV.is_gpu, reason="bfloat16 runs on a GPU")
def test_bfloat16_weights_are_refused_when_loaded_under_the_interpreter(tmp_path):
    """(session 52) A bf16 checkpoint (SmolLM2's and Llama 3.2's are) loaded as stored, or with dtype=torch.bfloat16,
    loaded under the interpreter, and the first launcher of prefill refused it as "x is bfloat16", an x the learner
    never made. Now the loader refuses it, naming the stored dtype or dtype=, and the fix; float32 loads."""
    folder = ckpt.build_checkpoint(tmp_path, dtype=torch.bfloat16)
    for dtype, message in (
        (None, r"the stored dtype of model\.layers\.0\.\S+ is bfloat16"),
        (torch.bfloat16, "^dtype is bfloat16"),
    ):
        with pytest.raises(TypeError, match=message + r".*interpreter does not have.*pass dtype=torch\.float32"):
            L.load_model(folder, dtype=dtype)
    assert L.load_model(folder, dtype=torch.float32).embed.dtype == torch.float32


def test_model_args_refuse_a_head_layout_the_layers_cannot_run():
    """Made by hand (not from a config.json), ModelArgs goes through lesson 07's LlamaArgs: a head width floored
    from dim / n_heads (100 / 6) or heads that do not group are refused, naming the fields."""
    base = dict(vocab_size=320, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=96)
    for fields, message in (
        (dict(dim=100, n_heads=6), "dim=100 does not split over n_heads=6"),
        (dict(n_kv_heads=3), "n_heads=4 query heads must split evenly over n_kv_heads=3"),
        (dict(vocab_size=0), "vocab_size must be a positive int"),
        (dict(n_layers=2.0), "n_layers must be a positive int"),
    ):
        with pytest.raises(ValueError, match=message):
            L.ModelArgs(**{**base, **fields})
    assert L.ModelArgs(**base).head_dim == 16 and L.ModelArgs(**{**base, "head_dim": 32}).head_dim == 32


@pytest.mark.parametrize("head_dim, width", [(80, 128), (96, 128), (72, 128), (24, 32), (8, 16), (2, 16)])
def test_a_head_width_the_kernels_do_not_take_is_padded_to_one_they_do(head_dim, width):
    """Peers' head widths (80, 96, a test config's 8 or 24): ModelArgs keeps the kernels' width in head_dim and the
    checkpoint's in real_head_dim, whether made by hand or by model_args; the same args made again stay as they are."""
    base = dict(vocab_size=32, n_layers=1, dim=64, n_heads=2, n_kv_heads=1, ffn_dim=32)
    args = L.ModelArgs(**base, head_dim=head_dim)
    assert (args.head_dim, args.real_head_dim) == (width, head_dim)
    assert dataclasses.replace(args, n_layers=2).head_dim == width and args.layer.head_dim == width
    assert L.rope_frequencies(args).shape == (width // 2,) and not L.rope_frequencies(args)[head_dim // 2 :].any()


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(head_dim=256), "head_dim 256: the kernels .* take heads up to 128 wide"),
        (dict(head_dim=130), "head_dim 130: the kernels"),
        (dict(head_dim=15), "head_dim=15: RoPE turns pairs"),
        (dict(head_dim=64, real_head_dim=24), "real_head_dim=24 with head_dim=64: .* here 32"),
        (dict(head_dim=32, real_head_dim=23), "real_head_dim=23 with head_dim=32"),
    ],
)
def test_head_widths_the_kernels_cannot_hold_are_refused_when_built(fields, message):
    """Wider than 128, odd, or a padded width that is not the narrowest holding the checkpoint's: refused by
    ModelArgs, naming the field, before any weight is read or kernel launched."""
    base = dict(vocab_size=32, n_layers=1, dim=64, n_heads=2, n_kv_heads=1, ffn_dim=32)
    with pytest.raises(ValueError, match=message):
        L.ModelArgs(**base, **fields)


def test_pad_heads_keeps_ropes_pairs_and_the_attention():
    """pad_heads widens each head with zeros after each half: rotating the padded rows with the padded tables and
    cutting the zeros out gives the checkpoint's rotation, and q k^T and the o projection are unchanged."""
    torch.manual_seed(0)
    H, D, width, C, T = 3, 24, 32, 20, 5
    args = L.ModelArgs(vocab_size=8, n_layers=1, dim=C, n_heads=H, n_kv_heads=H, ffn_dim=8, head_dim=D)
    w, x = torch.randn(H * D, C, dtype=torch.float64), torch.randn(T, C, dtype=torch.float64)
    wide = L.pad_heads(w, H, D, width)
    assert wide.shape == (H * width, C)
    keep = torch.cat([torch.arange(D // 2), width // 2 + torch.arange(D // 2)])  # a wide head's real rows
    assert torch.equal(wide.view(H, width, C)[:, keep], w.view(H, D, C))
    cos, sin = L.rope_cache(args, T, torch.float64, "cpu")
    q = (x @ wide.T).view(1, T, H, width)
    turned, _ = L.rope_ref(q, q, cos[None], sin[None])
    tables = rope_tables(T, D, args.rope_theta, dtype=torch.float64, device="cpu")  # the checkpoint's (1, T, D)
    want, _ = L.rope_ref(*[(x @ w.T).view(1, T, H, D)] * 2, *tables)
    torch.testing.assert_close(turned[..., keep], want, rtol=1e-6, atol=1e-6)
    assert not turned[..., [i for i in range(width) if i not in keep]].any()
    o = torch.randn(C, H * D, dtype=torch.float64)
    v = torch.randn(T, H * D, dtype=torch.float64)
    v_wide = L.pad_heads(v.T, H, D, width).T
    torch.testing.assert_close(v_wide @ L.pad_heads(o, H, D, width, dim=1).T, v @ o.T)


@pytest.mark.parametrize(
    "other, field",
    [
        (dict(n_kv_heads=1), "n_kv_heads 1"),
        (dict(head_dim=32), "head_dim 32"),
        (dict(n_layers=3), "n_layers 3"),
        (dict(rope_theta=500000.0), "rope_theta 500000.0"),  # the same shapes: only the tables differ
        (dict(rope_scaling={"rope_type": "linear", "factor": 4.0}), "rope_scaling"),
    ],
    ids=["kv-heads", "head-dim", "layers", "rope-theta", "rope-scaling"],
)
def test_a_cache_made_for_another_model_is_refused(tied, other, field):
    """prefill and decode_step take the RoPE tables from the cache: one made for a model of another RoPE would
    rotate silently wrong, one of other heads or layers fail with a raw error. The cache names its model's fields."""
    model, _ = tied
    args = L.ModelArgs(**{**vars(model.args), **other})
    other_model = L.Model(args, model.embed, model.layers, model.norm, model.lm_head)
    cache = L.new_cache(other_model, 1, 8)
    ids = prompt(B=1, T=3)
    with pytest.raises(ValueError, match=f"cache was made for another model: {field}"):
        L.prefill(model, ids, cache)
    pos = torch.zeros(1, dtype=torch.int32, device=ENV.device)
    with pytest.raises(ValueError, match=f"cache was made for another model: {field}"):
        L.decode_step(model, ids[:, 0], pos, cache)
    same = L.Model(L.ModelArgs(**vars(model.args)), model.embed, model.layers, model.norm, model.lm_head)
    L.prefill(model, ids, L.new_cache(same, 1, 8))  # an equal config, loaded again: accepted
    with pytest.raises(ValueError, match="the cache's keys are float16"):
        L.prefill(model, ids, L.new_cache(L.cast(model, torch.float16), 1, 8))


def test_kernel_refusals():
    d = ENV.device
    q = torch.randn(1, 4, 16, device=d)
    cache = torch.zeros(1, 8, 2, 16, device=d)
    lengths = torch.ones(1, dtype=torch.int32, device=d)
    qkv = torch.randn(1, 8, 16, device=d)
    cos = torch.ones(8, 16, device=d)
    utils.refuses(
        {
            "int64 lengths": lambda: L.decode_attention(q, cache, cache, lengths.long()),
            "caches of another head_dim": lambda: L.decode_attention(q, cache[..., :8], cache[..., :8], lengths),
            "heads that do not group": lambda: L.decode_attention(
                torch.randn(1, 3, 16, device=d), cache, cache, lengths
            ),
            "caches of another batch": lambda: L.decode_attention(q, cache.repeat(2, 1, 1, 1), cache, lengths),
            "an out of the wrong shape": lambda: L.decode_attention(q, cache, cache, lengths, out=torch.empty(1, 4, 8)),
            "an out aliasing q": lambda: L.decode_attention(q, cache, cache, lengths, out=q),
            "zero splits": lambda: L.decode_attention(q, cache, cache, lengths, n_splits=0),
            "int64 positions": lambda: L.rope_kv_write(qkv, cos, cos, lengths.long(), cache, cache.clone()),
            "tables shorter than the cache": lambda: L.rope_kv_write(qkv, cos[:4], cos[:4], lengths, cache, cache),
            "qkv with too few heads": lambda: L.rope_kv_write(qkv[:, :5], cos, cos, lengths, cache, cache.clone()),
            "a k cache of another dtype": lambda: L.rope_kv_write(qkv, cos, cos, lengths, cache.half(), cache.half()),
        },
        quiet=True,
    )


def test_decode_combine_checks_its_partials_and_out():
    """(session 52) decode_combine, public and called by lesson 13's paged_attention too, checked nothing: an out
    with fewer rows than the partials wrote past its end, and fp16 partials were read as fp32 words."""
    d = ENV.device
    q = torch.randn(2, 4, 16, device=d)
    cache = torch.randn(2, 8, 2, 16, device=d)
    lengths = torch.tensor([3, 8], dtype=torch.int32, device=d)
    acc, m, l_ = L.decode_partials(q, cache, cache.clone(), lengths, n_splits=2)
    buf = torch.full((2 * 4 * 16,), float("nan"), device=d)
    cases = {
        "an out of one sequence for two": (lambda: L.decode_combine(acc, m, l_, out=buf[:64].view(1, 4, 16)), "out"),
        "an int out": (lambda: L.decode_combine(acc, m, l_, out=torch.empty(2, 4, 16, device=d).int()), "out"),
        "a transposed out": (lambda: L.decode_combine(acc, m, l_, out=torch.empty(2, 16, 4, device=d).mT), "out"),
        "fp16 partial sums": (lambda: L.decode_combine(acc.half(), m, l_, out=torch.empty_like(q)), "acc"),
        "maxima of another shape": (lambda: L.decode_combine(acc, m[:, :2], l_, out=torch.empty_like(q)), "m "),
        "an out over the sums": (lambda: L.decode_combine(acc, m, l_, out=l_.view(-1)[:1].view(1, 1, 1)), "out"),
        "no out": (lambda: L.decode_combine(acc, m, l_, out=None), "out"),
    }
    for what, (call, name) in cases.items():
        with pytest.raises((ValueError, TypeError), match=name):
            call()
            pytest.fail(f"{what}: not refused")
    assert bool(buf[64:].isnan().all()), "decode_combine wrote past the end of its out"
    want = L.decode_attention(q, cache, cache.clone(), lengths)
    utils.check(L.decode_combine(acc, m, l_, out=torch.empty_like(q)), want, name="decode_combine", quiet=True)


def test_caches_of_no_position_or_no_kv_head_are_refused_and_numpy_splits_taken():
    """(probe08) A cache of max_len 0 or of KV 0 heads failed with a ZeroDivisionError in decode_split or in the
    launchers' head check (rope_kv_write, decode_attention, decode_attention_fused); n_splits=np.int64(2) was refused
    as "must be a positive int, got np.int64(2)"."""
    import numpy as np

    d = ENV.device
    q, qkv, cos = torch.randn(1, 4, 16, device=d), torch.randn(1, 8, 16, device=d), torch.ones(8, 16, device=d)
    lengths = torch.ones(1, dtype=torch.int32, device=d)
    no_row, no_head = torch.zeros(1, 0, 2, 16, device=d), torch.zeros(1, 8, 0, 16, device=d)
    calls = {}
    for what, c in (("max_len 0", no_row), ("KV 0", no_head)):
        calls[f"decode_attention, {what}"] = lambda c=c: L.decode_attention(q, c, c.clone(), lengths)
        calls[f"decode_attention_fused, {what}"] = lambda c=c: L.decode_attention_fused(q, c, c.clone(), lengths)
        calls[f"rope_kv_write, {what}"] = lambda c=c: L.rope_kv_write(
            qkv, cos[: c.shape[1]], cos[: c.shape[1]], lengths, c, c.clone()
        )
    utils.refuses(calls, quiet=True)
    k, v = torch.randn(1, 40, 2, 16, device=d), torch.randn(1, 40, 2, 16, device=d)
    lengths = torch.tensor([37], dtype=torch.int32, device=d)
    want = L.decode_attention(q, k, v, lengths, n_splits=2)
    for fn in (L.decode_attention, L.decode_attention_fused):
        assert torch.equal(fn(q, k, v, lengths, n_splits=np.int64(2)), want)


def test_no_launcher_writes_over_its_inputs():
    """An out (or a cache) sharing memory with something the kernel reads was accepted where the launcher's list of
    inputs left it out: decode_attention's out over v_cache overwrote the cache, rope_kv_write's out over v_cache
    or the tables wrote q into them, a k cache over qkv wrote keys over the heads still to be read."""
    d = ENV.device
    q = torch.randn(1, 4, 16, device=d)
    k, v = torch.zeros(1, 8, 2, 16, device=d), torch.zeros(1, 8, 2, 16, device=d)
    lengths = torch.ones(1, dtype=torch.int32, device=d)
    qkv, cos = torch.randn(1, 8, 16, device=d), torch.ones(8, 16, device=d)
    x, w = torch.randn(1, 24, device=d), torch.randn(8 * 16, 24, device=d)
    over_v = v.view(-1)[:64].view(1, 4, 16)  # a (B, H, D) view of v_cache's first elements

    def attention(fn):
        return lambda: fn(q, k, v, lengths, out=over_v)

    utils.refuses(
        {
            "decode_attention's out over v_cache": attention(L.decode_attention),
            "decode_attention_fused's out over v_cache": attention(L.decode_attention_fused),
            "rope_kv_write's out over v_cache": lambda: L.rope_kv_write(qkv, cos, cos, lengths, k, v, out=over_v),
            "rope_kv_write's out over the cos table": lambda: L.rope_kv_write(
                qkv, cos, cos.clone(), lengths, k, v, out=cos.view(-1)[:64].view(1, 4, 16)
            ),
            "a k cache over qkv": lambda: L.rope_kv_write(
                qkv, cos[:2], cos[:2], lengths, qkv.view(-1)[:64].view(1, 2, 2, 16), k[:, :2].clone()
            ),
            "decode_qkv_rope's out over the sin table": lambda: L.decode_qkv_rope(
                x, w, cos.clone(), cos, lengths, k, v, out=cos.view(-1)[:64].view(1, 4, 16)
            ),
        },
        quiet=True,
    )
    assert torch.equal(v, torch.zeros_like(v)), "a refused call wrote into v_cache"


# -- the fused batch-1 decode step ---------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", L.DECODE_GEMV_LOOPS)
def test_decode_gemv(loop):
    L.check_decode_gemv(lambda *args, **kw: L.decode_gemv(*args, loop=loop, **kw), quiet=True)
    for stages in (1, 3):  # GPU-like tilings (many programs, several K steps, a short last one), then loading ahead
        small = L.GemvSchedule(BLOCK_N=4, BLOCK_K=16, num_warps=4, num_stages=stages)
        L.check_decode_gemv(lambda *args, s=small, **kw: L.decode_gemv(*args, schedule=s, loop=loop, **kw), quiet=True)


@pytest.mark.parametrize("N, K", [(37, 70), (5, 64), (1, 16), (9, 15)])  # a short step, none, one step, only it
def test_the_gemv_loops_give_the_same_bits(N, K):
    """Loading ahead by hand ("prefetch") or by the compiler ("pipe") changes when the weights arrive, not the sums:
    at one schedule the two loops add the same products in the same order."""
    x = torch.randn(1, K, device=ENV.device, dtype=ENV.dtype)
    w = torch.randn(2 * N, K, device=ENV.device, dtype=ENV.dtype)
    norm = torch.rand(K, device=ENV.device, dtype=ENV.dtype) + 0.5
    res = torch.randn(1, N, device=ENV.device, dtype=ENV.dtype)
    s = L.GemvSchedule(BLOCK_N=4, BLOCK_K=16, num_warps=4, num_stages=3)
    for kw in ({"norm": norm}, {"norm": norm, "swiglu": True}, {"residual": res}):
        ww = w if kw.get("swiglu") else w[:N]
        a, *others = (L.decode_gemv(x, ww, schedule=s, loop=loop, **kw) for loop in L.DECODE_GEMV_LOOPS)
        for loop, b in zip(L.DECODE_GEMV_LOOPS[1:], others):
            assert_bitwise_equal(b, a, name=f"decode_gemv with {sorted(kw)}, N={N}, K={K}: {loop} against prefetch")


def _halves_swapped(x, w, **kw):
    if kw.get("swiglu"):
        w = torch.cat([w[w.shape[0] // 2 :], w[: w.shape[0] // 2]])
    return L.decode_gemv(x, w, **kw)


def _swiglu_as(wrong):
    """decode_gemv with SwiGLU computed by `wrong(x, w, N, kw)` (gate and up from decode_gemv without it)."""

    def planted(x, w, **kw):
        if not kw.get("swiglu"):
            return L.decode_gemv(x, w, **kw)
        out, kw = kw.pop("out"), {**kw, "swiglu": False}
        return out.copy_(wrong(x, w, w.shape[0] // 2, kw))

    return planted


def _silu_of_product(x, w, N, kw):
    return F.silu(L.decode_gemv(x, w[:N], **kw).float() * L.decode_gemv(x, w[N:], **kw).float())


def _up_rows_at_n_elements(x, w, N, kw):
    up = torch.as_strided(w, (N, w.shape[1]), (w.shape[1], 1), N)  # up row j read N + j K elements in, not (N + j) K
    return F.silu(L.decode_gemv(x, w[:N], **kw).float()) * L.decode_gemv(x, up, **kw).float()


@pytest.mark.parametrize(
    "planted, hint",
    [
        (lambda x, w, **kw: L.decode_gemv(x, w, **{**kw, "norm": None}), "The norm was left out"),
        (_halves_swapped, "Gate and up swapped"),
        (lambda x, w, **kw: L.decode_gemv(x, w, **{**kw, "residual": None}), "The residual was not added"),
        (lambda x, w, **kw: L.decode_gemv(x, w, **{**kw, "eps": 0.0}), "eps is missing"),
        (_swiglu_as(_silu_of_product), "silu was applied to the product"),
        (_swiglu_as(_up_rows_at_n_elements), "up's rows start N elements after gate's"),
    ],
)
def test_check_decode_gemv_names_the_mistake(planted, hint):
    with pytest.raises(AssertionError, match=hint):
        L.check_decode_gemv(planted, quiet=True)


def test_fused_step_matches_the_unfused_one(tied, monkeypatch):
    model, _ = tied
    ids = prompt(B=1, T=5)
    logits = {}
    for name, ops in (("fused", L.TRITON_DECODE), ("unfused", L.TRITON_DECODE_UNFUSED)):
        cache = L.new_cache(model, 1, 8)
        L.prefill(model, ids, cache)
        pos = torch.tensor([5], dtype=torch.int32, device=ENV.device)
        logits[name] = L.decode_step(model, ids[:, -1], pos, cache, ops)
    utils.check(logits["fused"], logits["unfused"], atol=1e-5, rtol=1e-5, reason="fp32 sums in another order")
    fused = L.generate(model, ids, 6)
    monkeypatch.setattr(L, "USE_TRITON_GEMV", False)  # the switch the sweep's winner sets
    assert torch.equal(fused, L.generate(model, ids, 6))


def test_decode_attention_takes_a_schedule():
    B, H, KV, D, max_len = 1, 4, 2, 16, 40
    q = torch.randn(B, H, D, device=ENV.device)
    k, v = (torch.randn(B, max_len, KV, D, device=ENV.device) for _ in range(2))
    lengths = torch.tensor([33], dtype=torch.int32, device=ENV.device)
    s = L.DecodeSchedule(BLOCK_N=32, PROGRAMS_PER_SM=8, MIN_BLOCK_N=16, num_warps=8, num_stages=3)
    out = L.decode_attention(q, k, v, lengths, out=utils.nan_empty((B, H, D)), schedule=s)
    utils.check(out, L.decode_attention_ref(q.double(), k.double(), v.double(), lengths), quiet=True)
    assert L.decode_schedule(16) == L.DECODE_ATTENTION_SCHEDULES[64]  # the next larger head_dim's row


def test_decode_gemv_refusals():
    x, w = torch.randn(1, 8, device=ENV.device), torch.randn(6, 8, device=ENV.device)
    buf = torch.randn(1, 7, device=ENV.device)
    cases = {
        "two rows": (lambda: L.decode_gemv(torch.randn(2, 8, device=ENV.device), w), "takes one"),
        "w of another K": (lambda: L.decode_gemv(x, w[:, :4].contiguous()), "must be"),
        "odd rows for swiglu": (lambda: L.decode_gemv(x, w[:5], swiglu=True), "even number"),
        "a residual of another shape": (
            lambda: L.decode_gemv(x, w, residual=torch.zeros(1, 5, device=ENV.device)),
            "residual",
        ),
        "a BLOCK_N of 3": (lambda: L.decode_gemv(x, w, schedule=L.GemvSchedule(3, 16, 4, 1)), "BLOCK_N"),
        "a tile past one block": (
            lambda: L.decode_gemv(x, w, schedule=L.GemvSchedule(2**20, 16, 4, 1)),
            "more than one block takes",
        ),  # fmt: skip
        "a loop it does not know": (lambda: L.decode_gemv(x, w, loop="pipelined"), "loop must be one of"),
        "... even with no outputs": (lambda: L.decode_gemv(x, w[:0], loop="pipelined"), "loop must be one of"),
        # out may be the residual itself (x += ...), not a view one element off it: the programs after the first
        # read the residual after the first wrote over it (a wrong result, silently)
        "an out that overlaps the residual": (
            lambda: L.decode_gemv(x, w, residual=buf[:, :6], out=buf[:, 1:]),
            "out shares memory with the input residual",
        ),
    }
    for _what, (call, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            call()
    with pytest.raises(TypeError, match="swiglu must be True or False, got 'no'"):  # session 53: 'no' was true
        L.decode_gemv(x, w, swiglu="no")
    assert L.decode_gemv(x, w[:0]).shape == (1, 0)  # no outputs: no launch


def test_the_fused_norms_refuse_a_negative_eps():
    """(probe08) decode_gemv and decode_qkv_rope with norm= took eps = -1, which lesson 07's rmsnorm refuses: rsqrt of
    a negative mean square made every output NaN, silently (x of RMS 0.3 here)."""
    x, w, cos, sin, pos, norm, (k, v) = _qkv_case(4, 2, 16, 24, 8, 3)
    x = x * 0.3
    utils.refuses(
        {
            "decode_gemv": lambda: L.decode_gemv(x, w, norm=norm, eps=-1.0),
            "decode_qkv_rope": lambda: L.decode_qkv_rope(x, w, cos, sin, pos, k, v, norm=norm, eps=-1.0),
        },
        quiet=True,
    )
    with pytest.raises(ValueError, match="eps must be >= 0"):
        L.decode_gemv(x, w, norm=norm, eps=-1.0)


# -- fewer launches a layer: RoPE in the qkv GEMV, flash-decoding in one launch (DECODE_FUSIONS) -------------------


def _qkv_case(H, KV, D, C, max_len, p, seed=0):
    g = torch.Generator().manual_seed(seed)
    fake = L.ModelArgs(vocab_size=1, n_layers=1, dim=H * D, n_heads=H, n_kv_heads=KV, ffn_dim=1)
    cos, sin = L.rope_cache(fake, max_len, torch.float32)
    x = torch.randn(1, C, generator=g).to(ENV.device)
    w = (torch.randn((H + 2 * KV) * D, C, generator=g) / math.sqrt(C)).to(ENV.device)
    norm = (1 + 0.1 * torch.randn(C, generator=g)).to(ENV.device)
    caches = [torch.randn(1, max_len, KV, D, generator=g).to(ENV.device) for _ in range(2)]
    return x, w, cos, sin, torch.tensor([p], dtype=torch.int32, device=ENV.device), norm, caches


@pytest.mark.parametrize("loop", L.DECODE_GEMV_LOOPS)
def test_decode_qkv_rope(loop):
    L.check_decode_qkv_rope(lambda *a, **kw: L.decode_qkv_rope(*a, loop=loop, **kw), quiet=True)
    for stages in (1, 3):  # GPU-like tilings: 2 pairs a program, several K steps, then loading ahead
        s = L.GemvSchedule(BLOCK_N=4, BLOCK_K=16, num_warps=4, num_stages=stages)
        L.check_decode_qkv_rope(lambda *a, s=s, **kw: L.decode_qkv_rope(*a, schedule=s, loop=loop, **kw), quiet=True)


@pytest.mark.parametrize(
    "H, KV, D, p",
    [(2, 2, 32, 0), (4, 1, 64, 6), (8, 1, 16, 3), (4, 1, 128, 7)],  # GQA 1, 4, 8; pos 0 and the cache's last row
)
def test_qkv_rope_is_the_gemv_then_rope_kv_write_bit_for_bit(H, KV, D, p):
    x, w, cos, sin, pos, norm, (k0, v0) = _qkv_case(H, KV, D, 24, 8, p)
    k1, v1, k2, v2 = k0.clone(), v0.clone(), k0.clone(), v0.clone()
    q1 = L.decode_qkv_rope(x, w, cos, sin, pos, k1, v1, norm=norm)
    qkv = L.decode_gemv(x, w, norm=norm).view(1, H + 2 * KV, D)  # the same schedule: the same sums
    q2 = L.rope_kv_write(qkv, cos, sin, pos, k2, v2)
    if ENV.interpret:  # the same sums in the same order, then rope_kv_write_kernel's arithmetic
        assert torch.equal(q1, q2) and torch.equal(k1, k2) and torch.equal(v1, v2)
    else:  # compiled, a (pairs, BLOCK_K) tile may reduce its rows in another order than the GEMV's tile
        for a, b in ((q1, q2), (k1, k2), (v1, v2)):
            utils.check(a, b, atol=1e-5, rtol=1e-5, quiet=True, reason="fp32 sums reduced in another order")
    untouched = torch.arange(8, device=ENV.device) != p
    assert torch.equal(k1[:, untouched], k0[:, untouched]) and torch.equal(v1[:, untouched], v0[:, untouched])


def _wrong_pos(x, w, cos, sin, pos, k, v, **kw):
    return L.decode_qkv_rope(x, w, cos, sin, pos + 1, k, v, **kw)


def _v_rotated(x, w, cos, sin, pos, k, v, **kw):
    q = L.decode_qkv_rope(x, w, cos, sin, pos, k, v, **kw)
    p = int(pos[0])
    v[0, p] = L._rotated_like_k(v[0, p], cos[p], sin[p])
    return q


def _interleaved(x, w, cos, sin, pos, k, v, **kw):
    D = k.shape[-1]
    pi = torch.arange(D, device=w.device).view(D // 2, 2).T.reshape(-1)
    perm = (torch.arange(w.shape[0] // D, device=w.device)[:, None] * D + pi[None, :]).reshape(-1)
    p, unperm = int(pos[0]), torch.argsort(pi)
    q = L.decode_qkv_rope(x, w[perm].contiguous(), cos, sin, pos, k, v, **kw)
    k[0, p], v[0, p] = k[0, p][..., unperm].clone(), v[0, p][..., unperm].clone()
    return q[..., unperm].contiguous()


@pytest.mark.parametrize(
    "planted, hint",
    [(_interleaved, "neighbouring outputs"), (_v_rotated, "v was rotated")],
)
def test_check_decode_qkv_rope_names_the_mistake(planted, hint):
    with pytest.raises(AssertionError, match=hint):
        L.check_decode_qkv_rope(planted, quiet=True)


def test_check_decode_qkv_rope_fails_at_the_wrong_position():
    with pytest.raises(AssertionError):
        L.check_decode_qkv_rope(_wrong_pos, quiet=True)


@pytest.mark.parametrize("variant", ["ticket", "one-pass"])
def test_decode_attention_fused(variant):
    fn = lambda *a, **kw: L.decode_attention_fused(*a, variant=variant, **kw)  # noqa: E731
    L.check_decode_attention(fn, quiet=True)


@pytest.mark.parametrize(
    "B, H, KV, D, n_splits",
    [(1, 4, 4, 32, 3), (2, 8, 2, 64, 5), (1, 8, 1, 128, None), (3, 4, 1, 16, 70)],  # GQA 1, 4, 8; 1 key a split
)
def test_ticket_attention_called_again_and_again(B, H, KV, D, n_splits):
    """The ticket counters are back at 0 after every launch, so the next call (the next layer, token, or CUDA
    graph replay) finds them ready: call it several times in a row, with other lengths each time."""
    max_len = 70
    q = torch.randn(B, H, D, device=ENV.device)
    k, v = (torch.randn(B, max_len, KV, D, device=ENV.device) for _ in range(2))
    for step in range(3):
        lengths = torch.tensor([1 + (7 * b + 23 * step) % max_len for b in range(B)], dtype=torch.int32)
        lengths = lengths.to(ENV.device)
        out = L.decode_attention_fused(q, k, v, lengths, n_splits=n_splits, out=utils.nan_empty((B, H, D)))
        utils.check(out, L.decode_attention_ref(q.double(), k.double(), v.double(), lengths), quiet=True)
        assert all(int(t.abs().sum()) == 0 for t in L._TICKETS.values()), "a ticket counter was left non-zero"


def test_check_decode_attention_catches_a_fused_variant_reading_past_the_length():
    def planted(q, k, v, lengths, **kw):
        return L.decode_attention_fused(q, k, v, torch.full_like(lengths, k.shape[1]), **kw)

    with pytest.raises(AssertionError, match="Keys past the sequence's length"):
        L.check_decode_attention(planted, quiet=True)


FUSIONS = [
    L.DecodeFusions(rope_in_qkv=False, attention="split+combine"),  # the step before these fusions
    L.DecodeFusions(rope_in_qkv=True, attention="split+combine"),
    L.DecodeFusions(rope_in_qkv=False, attention="ticket"),
    L.DecodeFusions(rope_in_qkv=True, attention="ticket", n_splits=3),
    L.DecodeFusions(rope_in_qkv=True, attention="one-pass"),
    L.DecodeFusions(rope_in_qkv=True, attention="split+combine", pdl=True),  # the GEMVs launched early (a GPU's)
    L.DecodeFusions(rope_in_qkv=True, attention="split+combine", pdl="after loop", attention_pdl=True),
    L.DecodeFusions(rope_in_qkv=True, attention="ticket", pdl="after loop", attention_pdl=True),
]


def test_every_fusion_gives_the_same_steps(tied, monkeypatch):
    """Several decode steps at B = 1 (the fused GEMV step) and B = 2 under each DECODE_FUSIONS: logits as the
    step without fusions and REF_DECODE's; the caches bit for bit where the arithmetic is the same (RoPE in
    the GEMV's epilogue computes what rope_kv_write computes)."""
    model, _ = tied
    for B in (1, 2):
        ids = prompt(B=B, T=9)
        runs = {}
        for f in [*(FUSIONS if B == 1 else FUSIONS[::2]), "ref"]:  # B = 2: no fused GEMV, the attention varies
            monkeypatch.setattr(L, "DECODE_FUSIONS", FUSIONS[0] if f == "ref" else f)
            cache = L.new_cache(model, B, 9)
            L.prefill(model, ids[:, :6], cache)
            pos = torch.full((B,), 6, dtype=torch.int32, device=ENV.device)
            logits = []
            for t in range(6, 9):  # the last step writes the cache's last row
                ops = L.REF_DECODE if f == "ref" else L.TRITON_DECODE
                logits.append(L.decode_step(model, ids[:, t - 1], pos, cache, ops))
                pos += 1
            runs[f] = (torch.stack(logits), cache)
        base_logits, base_cache = runs[FUSIONS[0]]
        for f, (logits, cache) in runs.items():
            tol = dict(atol=1e-4, rtol=1e-4) if f == "ref" else dict(atol=1e-5, rtol=1e-5)
            utils.check(logits, base_logits, name=f"B={B} {f}", quiet=True, reason="fp32, sums reordered", **tol)
            if f != "ref" and ENV.interpret:  # the caches: by rope_kv_write or the GEMV's epilogue, the same bits
                assert torch.equal(cache.k, base_cache.k) and torch.equal(cache.v, base_cache.v), f
            elif f != "ref":
                utils.check(cache.k, base_cache.k, atol=1e-5, rtol=1e-5, quiet=True, reason="fp32, sums reordered")
    assert all(int(t.abs().sum()) == 0 for t in L._TICKETS.values()), "a ticket counter was left non-zero"


def test_fused_decode_refusals():
    x, w, cos, sin, pos, norm, (k, v) = _qkv_case(4, 2, 16, 24, 8, 3)
    q = torch.randn(1, 4, 16, device=ENV.device)
    lengths = torch.ones(1, dtype=torch.int32, device=ENV.device)
    cases = {
        "two rows of x": (lambda: L.decode_qkv_rope(x.repeat(2, 1), w, cos, sin, pos, k, v), "B = 1"),
        "w not (H + 2 KV) D rows": (lambda: L.decode_qkv_rope(x, w[:-16], cos, sin, pos, k, v), "q, k and v"),
        "w of another K": (lambda: L.decode_qkv_rope(x, w[:, :20].contiguous(), cos, sin, pos, k, v), "q, k and v"),
        "int64 pos": (lambda: L.decode_qkv_rope(x, w, cos, sin, pos.long(), k, v), "pos"),
        "tables shorter than the cache": (lambda: L.decode_qkv_rope(x, w, cos[:4], sin[:4], pos, k, v), "cos"),
        "a batch-2 cache": (
            lambda: L.decode_qkv_rope(x, w, cos, sin, pos, k.repeat(2, 1, 1, 1), v.repeat(2, 1, 1, 1)),
            "k_cache",
        ),
        "an out aliasing the cache": (
            lambda: L.decode_qkv_rope(x, w, cos, sin, pos, k, v, out=k.view(-1)[:64].view(1, 4, 16)),
            "out",
        ),
        "an unknown variant": (lambda: L.decode_attention_fused(q, k, v, lengths, variant="fast"), "variant"),
        "zero splits": (lambda: L.decode_attention_fused(q, k, v, lengths, n_splits=0), "n_splits"),
        "int64 lengths": (lambda: L.decode_attention_fused(q, k, v, lengths.long()), "lengths"),
        "the ticket let the next launch after its loop": (
            lambda: L.decode_attention_fused(q, k, v, lengths, pdl="after loop"),
            "pdl",
        ),
    }
    for _what, (call, message) in cases.items():
        with pytest.raises((ValueError, TypeError), match=message):
            call()
    empty = torch.zeros(0, 8, 2, 16, device=ENV.device)
    q0 = torch.randn(0, 4, 16, device=ENV.device)
    l0 = torch.zeros(0, dtype=torch.int32, device=ENV.device)
    for variant in ("ticket", "one-pass"):
        assert L.decode_attention_fused(q0, empty, empty, l0, variant=variant).shape == (0, 4, 16)


@pytest.mark.skipif(not ENV.is_gpu, reason="CUDA graphs need a GPU")
def test_ticket_attention_replayed_from_a_cuda_graph():
    """A captured launch replays with the counters the previous replay left: each replay must find them at 0."""
    B, H, KV, D, max_len = 2, 8, 2, 64, 300
    q = torch.randn(B, H, D, device=ENV.device)
    k, v = (torch.randn(B, max_len, KV, D, device=ENV.device) for _ in range(2))
    lengths = torch.tensor([1, 300], dtype=torch.int32, device=ENV.device)
    out = torch.empty_like(q)
    graph = L.capture(lambda: L.decode_attention_fused(q, k, v, lengths, out=out, variant="ticket"), ())
    for step in range(4):
        lengths.copy_(torch.tensor([1 + 70 * step, 300 - 50 * step], dtype=torch.int32))
        graph.replay()
        utils.check(out, L.decode_attention_ref(q.double(), k.double(), v.double(), lengths), quiet=True)


# -- launching the next kernel early (programmatic dependent launch, DECODE_FUSIONS.pdl) ---------------------------


def _pdl_jobs(offline, pdl, capability=90):
    """utils.offline jobs: the batch-1 step's GEMVs as it launches them at TinyLlama's shape (bf16), with PDL = pdl
    (0: launched in order; 1, 2, 3: early, the next kernel let launch at PDL_TRIGGERS[pdl - 1])."""
    jobs = []
    for N, K, flags in ((2560, 2048, (1, 0, 0)), (5632, 2048, (1, 1, 0)), (2048, 5632, (0, 0, 1))):
        s = L.DECODE_GEMV_SCHEDULES.get((N, K), L.DECODE_GEMV_SCHEDULES[None])
        NORM, SWIGLU, RESIDUAL = map(bool, flags)
        meta = dict(NORM=NORM, SWIGLU=SWIGLU, RESIDUAL=RESIDUAL, BLOCK_N=s.BLOCK_N, BLOCK_K=s.BLOCK_K,
                    PREFETCH=True, PDL=pdl)  # fmt: skip
        pointers = dict(x_ptr="bf16", w_ptr="bf16", norm_ptr="bf16", res_ptr="bf16", out_ptr="bf16")
        ints = dict(N=N, K=K, eps=1e-5)
        jobs.append(offline.job("decode_gemv_kernel", pointers=pointers, ints=ints, constexprs=meta,
                                num_warps=s.num_warps, num_stages=1, capability=capability))  # fmt: skip
    s = L.DECODE_GEMV_SCHEDULES[(2560, 2048)]
    meta = dict(NORM=True, HEAD_DIM=64, BLOCK_P=s.BLOCK_N // 2, BLOCK_K=s.BLOCK_K, PREFETCH=True, PDL=pdl)
    pointers = {n: "bf16" for n in ("x_ptr", "w_ptr", "norm_ptr", "cos_ptr", "sin_ptr", "q_ptr", "k_cache_ptr",
                                    "v_cache_ptr")}  # fmt: skip
    pointers["pos_ptr"] = "i32"
    ints = dict(H=32, KV=4, K=2048, eps=1e-5, stride_ct=256, max_len=2048)
    jobs.append(offline.job("decode_qkv_rope_kernel", pointers=pointers, ints=ints, constexprs=meta,
                            num_warps=s.num_warps, num_stages=1, capability=capability))  # fmt: skip
    return jobs


def test_early_launched_gemvs_wait_after_their_first_weights_and_before_anything_else():
    """Compiled for an H100 without one: with PDL each GEMV loads its first weights, and only then waits for the
    kernel before (griddepcontrol.wait), before it writes anything; it lets the next kernel launch
    (griddepcontrol.launch_dependents) where PDL says. Without PDL neither instruction is there. No spills."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    jobs = [j for pdl in range(len(L.PDL_TRIGGERS) + 1) for j in _pdl_jobs(offline, pdl)]
    for job, compiled in zip(jobs, offline.compile_kernels(L.__file__, jobs)):
        pdl = job["constexprs"]["PDL"]
        where = f"{job['kernel']} at {job['ints'].get('N', 2560)}x{job['ints']['K']}, PDL={pdl}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        offline.check_pdl_order(compiled.ptx, L.PDL_TRIGGERS[pdl - 1] if pdl else None, where)


def test_pipe_gemvs_compile_with_their_loops_pipelined_and_wait_before_they_store():
    """DECODE_GEMV_LOOP = "pipe" at DECODE_PIPE_SCHEDULES's rows, as the step launches the GEMVs at TinyLlama's and
    Llama-3.2-1B's shapes, compiled for an H100: the weights of the steps K does not cut short copied by 16-byte
    cp.async (Triton pipelined a loop whose loads feed no tl.dot), no spills, the wait before every store and the
    next kernel let launch where DECODE_FUSIONS.pdl says. Unlike the "prefetch" loop no weight is loaded before the
    wait: the pipeline's first loads are the compiler's, at the loop."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    trigger = L.DECODE_FUSIONS.pdl if L.DECODE_FUSIONS.pdl in L.PDL_TRIGGERS else "start"
    pdl = 1 + L.PDL_TRIGGERS.index(trigger)
    pointers = dict(x_ptr="bf16", w_ptr="bf16", norm_ptr="bf16", res_ptr="bf16", out_ptr="bf16")
    jobs = []
    shapes = ((2048, 2048, (0, 0, 1)), (5632, 2048, (1, 1, 0)), (2048, 5632, (0, 0, 1)), (32000, 2048, (1, 0, 0)),
              (8192, 2048, (1, 1, 0)), (2048, 8192, (0, 0, 1)), (128256, 2048, (1, 0, 0)))  # fmt: skip
    tables = [L.decode_pipe_schedules(name) for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200")]
    for (N, K, flags), table in itertools.product(shapes, tables):
        s = table.get((N, K), table[None])  # gemv_schedule's on that GPU
        NORM, SWIGLU, RESIDUAL = map(bool, flags)
        meta = dict(NORM=NORM, SWIGLU=SWIGLU, RESIDUAL=RESIDUAL, BLOCK_N=s.BLOCK_N, BLOCK_K=s.BLOCK_K, PDL=pdl,
                    **L.gemv_loads(s, "pipe"))  # fmt: skip
        jobs.append(offline.job("decode_gemv_kernel", pointers=pointers, ints=dict(N=N, K=K, eps=1e-5),
                                constexprs=meta, num_warps=s.num_warps, num_stages=1))  # fmt: skip
    for (rows, H, KV), table in itertools.product(((2560, 32, 4), (3072, 32, 8)), tables):  # qkv + RoPE + cache
        s = table.get((rows, 2048), table[None])
        meta = dict(NORM=True, HEAD_DIM=64, BLOCK_P=max(1, s.BLOCK_N // 2), BLOCK_K=s.BLOCK_K, PDL=pdl,
                    **L.gemv_loads(s, "pipe"))  # fmt: skip
        ptrs = {n: "bf16" for n in ("x_ptr", "w_ptr", "norm_ptr", "cos_ptr", "sin_ptr", "q_ptr", "k_cache_ptr",
                                    "v_cache_ptr")}  # fmt: skip
        ptrs["pos_ptr"] = "i32"
        jobs.append(offline.job("decode_qkv_rope_kernel", pointers=ptrs, constexprs=meta, num_warps=s.num_warps,
                                num_stages=1, ints=dict(H=H, KV=KV, K=2048, eps=1e-5, stride_ct=KV * 64,
                                                              max_len=2048)))  # fmt: skip
    for job, compiled in zip(jobs, offline.compile_kernels(L.__file__, jobs)):
        where = f"{job['kernel']} at {job['ints'].get('N', 'qkv')}x{job['ints']['K']}, PIPE={job['constexprs']['PIPE']}"
        assert job["constexprs"]["PIPE"] >= 2, f"{where}: the pipe table's num_stages is the depth, 2 or more"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        assert 16 in compiled.cp_async_bytes, f"{where}: the weights are not copied by 16-byte cp.async"
        at = offline.griddepcontrol_order(compiled.ptx)
        assert 0 <= at["wait"] < at["first_store"], f"{where}: no wait before the stores"
        if trigger == "start":
            assert 0 <= at["trigger"] < at["wait"], f"{where}: the next kernel not let launch at the start"
        if trigger == "after loop":
            assert at["wait"] < at["trigger"] < at["first_store"], f"{where}: the next kernel let launch too early"


def test_a_gpu_of_its_own_gets_its_rows_over_the_h100_table(monkeypatch):
    """decode_pipe_schedules: an H200 (by a part of its name) gets DECODE_PIPE_SCHEDULES_BY_GPU's rows over the H100's
    table, any other GPU the H100's alone; an edit to either table is seen at the next call (the sweeps edit them)."""
    h100 = L.decode_pipe_schedules("NVIDIA H100 80GB HBM3")
    assert h100 == L.DECODE_PIPE_SCHEDULES and h100 is not L.DECODE_PIPE_SCHEDULES
    assert L.decode_pipe_schedules("NVIDIA A100-SXM4-40GB") == L.DECODE_PIPE_SCHEDULES
    h200 = L.decode_pipe_schedules("NVIDIA H200")
    own = L.DECODE_PIPE_SCHEDULES_BY_GPU["H200"]
    assert L.gpu_pipe_rows("NVIDIA H200") is own and L.gpu_pipe_rows("NVIDIA H100 80GB HBM3") is None
    assert own and all(h200[key] == row for key, row in own.items())
    assert all(h200[key] == row for key, row in L.DECODE_PIPE_SCHEDULES.items() if key not in own)
    assert any(L.DECODE_PIPE_SCHEDULES.get(key) != row for key, row in own.items()), "no row differs from the H100's"
    row = L.GemvSchedule(BLOCK_N=2, BLOCK_K=256, num_warps=2, num_stages=2)
    monkeypatch.setitem(own, (5632, 2048), row)
    monkeypatch.setitem(L.DECODE_PIPE_SCHEDULES, (2560, 2048), row)
    assert L.decode_pipe_schedules("NVIDIA H200")[(5632, 2048)] == row
    assert L.decode_pipe_schedules("NVIDIA H200")[(2560, 2048)] == row
    assert L.decode_pipe_schedules("NVIDIA H100 80GB HBM3")[(5632, 2048)] != row


def test_pipe_gemvs_compile_for_a_t4_and_an_a100():
    """DECODE_GEMV_LOOP = "pipe" where no PDL exists, at TinyLlama's rows: on an A100 (sm_80) the weights still come
    by 16-byte cp.async, with no spills; a T4 (sm_75) has no cp.async and the same loop compiles to plain loads (fp16
    there: a T4 has no bf16 arithmetic). The tables are an H100's: on a T4 either loop spills a few bytes at some
    rows ("prefetch" 20 at gate/up, "pipe" 8 at wo and the head), a cost of the schedule, not of the loop."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    jobs = []
    for capability, act in ((75, "fp16"), (80, "bf16")):
        for N, K, swiglu in ((2048, 2048, False), (5632, 2048, True), (2048, 5632, False), (32000, 2048, False)):
            s = L.DECODE_PIPE_SCHEDULES.get((N, K), L.DECODE_PIPE_SCHEDULES[None])
            meta = dict(NORM=True, SWIGLU=swiglu, RESIDUAL=not swiglu, BLOCK_N=s.BLOCK_N, BLOCK_K=s.BLOCK_K,
                        **L.gemv_loads(s, "pipe"))  # fmt: skip
            pointers = dict(x_ptr=act, w_ptr=act, norm_ptr=act, res_ptr=act, out_ptr=act)
            ints = dict(N=N, K=K, eps=1e-5)
            jobs.append(offline.job("decode_gemv_kernel", pointers=pointers, ints=ints, constexprs=meta,
                                    num_warps=s.num_warps, num_stages=1, capability=capability))  # fmt: skip
    for job, compiled in zip(jobs, offline.compile_kernels(L.__file__, jobs)):
        where = f"decode_gemv_kernel at {job['ints']['N']}x{job['ints']['K']} for sm_{job['capability']}"
        assert compiled.error is None, f"{where}: {compiled.error}"
        if job["capability"] >= 80:
            assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
            assert 16 in compiled.cp_async_bytes, f"{where}: the weights are not copied by 16-byte cp.async"
        else:
            assert not compiled.cp_async_bytes, f"{where}: cp.async on a GPU that has none"
            assert "ld.global" in compiled.ptx, f"{where}: no plain loads of the weights"


def test_early_launched_attention_waits_before_it_reads_anything():
    """Flash-decoding's two kernels with PDL = 1, compiled for an H100: they let the next kernel launch, then wait,
    before their first load (q, the cache, the partials: all written by the kernels before)."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    s = L.DECODE_ATTENTION_SCHEDULES[64]
    partials = offline.job(
        "decode_attention_kernel",
        pointers=dict(
            q_ptr="bf16", k_ptr="bf16", v_ptr="bf16", lengths_ptr="i32", acc_ptr="fp32", m_ptr="fp32", l_ptr="fp32"
        ),  # fmt: skip
        ints=dict(KV=4, GROUP=8, max_len=768, split_len=64, qk_scale=0.18, stride_cb=196608, stride_ct=256),
        constexprs=dict(HEAD_DIM=64, BLOCK_H=16, BLOCK_N=s.BLOCK_N, DOT_PRECISION="tf32", PDL=1),
        num_warps=s.num_warps,
        num_stages=s.num_stages,
    )
    combine = offline.job(
        "decode_combine_kernel",
        pointers=dict(acc_ptr="fp32", m_ptr="fp32", l_ptr="fp32", out_ptr="bf16"),
        ints=dict(n_splits=12),
        constexprs=dict(HEAD_DIM=64, BLOCK_S=16, PDL=1),
    )
    for job, compiled in zip((partials, combine), offline.compile_kernels(L.__file__, [partials, combine])):
        at = offline.griddepcontrol_order(compiled.ptx)
        assert 0 <= at["trigger"] < at["wait"] < at["first_load"], f"{job['kernel']}: {at}"


def test_pdl_launch_asks_only_where_the_gpu_has_it(monkeypatch):
    """pdl_launch: the launch options only on a compiled Hopper (or newer); elsewhere nothing, so the kernel's
    PDL stays 0 and it waits for nobody (as an A100 or a T4 would run it, or the interpreter)."""
    import dataclasses

    base = utils.mode.current()
    for device, capability, interpret, want in (
        ("cuda", (9, 0), False, True),
        ("cuda", (8, 0), False, False),
        ("cuda", (7, 5), False, False),
        ("cpu", None, True, False),
    ):
        env = dataclasses.replace(base, device=device, capability=capability, interpret=interpret)
        monkeypatch.setattr(utils.mode, "current", lambda env=env: env)
        for pdl, index in ((True, 1), *((t, i + 1) for i, t in enumerate(L.PDL_TRIGGERS))):
            assert L.pdl_launch(pdl) == ({"PDL": index, "launch_pdl": True} if want else {}), (device, pdl)
        assert L.pdl_launch(False) == {}
        with pytest.raises(ValueError, match="pdl must be"):
            L.pdl_launch("early")


@pytest.mark.skipif(not ENV.is_gpu, reason="programmatic dependent launch needs a GPU")
@pytest.mark.parametrize("attention", ["split+combine", "ticket"])
def test_launching_early_changes_no_bit(attention):
    """A TinyLlama-like model (2 layers, random bf16 weights; fp16 without bf16), batch 1, 24 decode steps replayed
    from a CUDA graph with the GEMVs and the attention kernels (two launches, or the ticket's one) launched early
    (each of PDL_TRIGGERS) and in order: the same logits and caches, bit for bit. A GEMV that read x before its wait
    would read the layer before's x half written; a ticket kernel that read q before its wait, the layer before's q."""
    cfg = dict(model_type="llama", vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
               num_attention_heads=32, num_key_value_heads=4, rms_norm_eps=1e-5, rope_theta=10000.0,
               max_position_embeddings=2048, tie_word_embeddings=False)  # fmt: skip
    dtype = ENV.dtype
    model = L.model_from_state_dict(L.model_args(cfg), ckpt.random_state_dict(cfg, seed=3), dtype=dtype)
    ids = prompt(B=1, T=40, V=cfg["vocab_size"])
    runs = []
    saved = L.DECODE_FUSIONS
    try:
        for pdl in (False, *L.PDL_TRIGGERS):
            L.DECODE_FUSIONS = saved._replace(pdl=pdl, attention=attention, attention_pdl=bool(pdl))
            cache = L.new_cache(model, 1, 40)
            L.prefill(model, ids[:, :16], cache)
            pos = torch.full((1,), 16, dtype=torch.int32, device=ENV.device)
            token = ids[:, 15].clone()
            logits = torch.empty(1, cfg["vocab_size"], device=ENV.device)
            graph = L.capture(lambda: logits.copy_(L.decode_step(model, token, pos, cache)), (cache.k, cache.v))
            steps = []
            for t in range(16, 40):
                token.copy_(ids[:, t])
                graph.replay()
                steps.append(logits.clone())
                pos += 1
            runs.append((torch.stack(steps), cache.k.clone(), cache.v.clone()))
    finally:
        L.DECODE_FUSIONS = saved
    (l0, k0, v0), *early = runs
    for pdl, (l1, k1, v1) in zip(L.PDL_TRIGGERS, early):
        assert torch.equal(k0, k1) and torch.equal(v0, v1), f"the caches differ launched early ({pdl})"
        assert torch.equal(l0, l1), f"logits differ launched early ({pdl}): {(l0 - l1).abs().max().item():.3g}"


# -- issue 11: flash-decoding's keys and values through TMA (decode_attention_tma_kernel) ---------------------------
TMA = L.DecodeSchedule(BLOCK_N=16, PROGRAMS_PER_SM=2, MIN_BLOCK_N=16, num_warps=4, num_stages=3, TMA="device")


@pytest.mark.parametrize("mode", L.TMA_MODES)
def test_decode_attention_tma(mode, monkeypatch):
    rows = {D: s._replace(TMA=mode) for D, s in L.DECODE_ATTENTION_TMA_SCHEDULES.items()}
    monkeypatch.setattr(L, "DECODE_ATTENTION_TMA_SCHEDULES", rows)
    L.check_decode_attention(L.decode_attention_tma, quiet=True)


def _decode_inputs(B, H, KV, D, max_len, lens, seed=0):
    gen = torch.Generator(device=ENV.device).manual_seed(seed)
    q = torch.randn(B, H, D, device=ENV.device, generator=gen)
    k, v = (torch.randn(B, max_len, KV, D, device=ENV.device, generator=gen) for _ in range(2))
    return q, k, v, torch.tensor(lens, dtype=torch.int32, device=ENV.device)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the sequence of no keys: -inf - (-inf)
@pytest.mark.parametrize("mode", L.TMA_MODES)
@pytest.mark.parametrize(
    "B, H, KV, D, max_len, lens, whole_waves",
    [
        (1, 8, 8, 64, 37, [37], False),  # GROUP 1, a length no multiple of BLOCK_N
        (3, 8, 2, 64, 50, [1, 17, 50], True),  # GROUP 4, length 1, lengths that differ
        (2, 8, 1, 128, 40, [33, 16], True),  # GROUP 8, D 128, a length that ends on a block
        (2, 4, 1, 32, 70, [0, 70], False),  # a sequence with no keys yet beside a full one
    ],
)
def test_tma_kernels_against_the_reference(B, H, KV, D, max_len, lens, whole_waves, mode):
    """Awkward shapes, in both TMA modes; the caches past each length hold NaN (a cache of torch.empty): a block
    that read them as values would spread NaN through p @ v, even with p = 0."""
    q, k, v, lengths = _decode_inputs(B, H, KV, D, max_len, lens)
    ref = L.decode_attention_ref(q.double(), k.double(), v.double(), lengths.clamp_min(1))
    for b, n in enumerate(lens):
        k[b, n:], v[b, n:] = float("nan"), float("nan")
    s = TMA._replace(WHOLE_WAVES=whole_waves, TMA=mode)
    out = L.decode_attention(q, k, v, lengths, out=utils.nan_empty((B, H, D)), schedule=s)
    keep = lengths > 0  # no keys: the combine divides 0 by 0 (what the pointer kernel does too)
    utils.check(out[keep], ref[keep], quiet=True, name=f"TMA decode attention, lengths {lens}")


@pytest.mark.skipif(not ENV.interpret, reason="bit for bit where the interpreter multiplies both alike")
@pytest.mark.parametrize("mode", L.TMA_MODES)
@pytest.mark.parametrize("n_splits", [None, 1, 3])
def test_tma_partials_are_the_pointer_kernels_bit_for_bit(n_splits, mode):
    """Only the loads differ: under the interpreter the same partial results (acc, m, l), every split."""
    q, k, v, lengths = _decode_inputs(3, 8, 2, 32, 45, [45, 1, 30], seed=1)
    tma = L.decode_partials(q, k, v, lengths, n_splits, schedule=TMA._replace(TMA=mode))
    pointers = L.decode_partials(q, k, v, lengths, n_splits, schedule=TMA._replace(TMA=""))
    for a, b in zip(tma, pointers):
        assert torch.equal(a, b)


def test_tma_falls_back_to_pointers_where_it_cannot_run(monkeypatch):
    """No TMA on the GPU (pre-Hopper, TRITON_HARD_WAY_AS) or rows off 16-byte boundaries: the pointer kernel runs
    the same schedule."""
    q, k, v, lengths = _decode_inputs(2, 4, 2, 16, 40, [40, 9])
    ref = L.decode_attention_ref(q.double(), k.double(), v.double(), lengths)
    offset = torch.empty(k.numel() + 1, device=ENV.device)[1:].view(k.shape)  # fp32: 4 bytes off 16
    offset.copy_(k)
    assert L._tma_ready(k, v) and not L._tma_ready(offset, v)

    class NotLaunched:  # kernel[grid]: a launch fails the test
        def __getitem__(self, grid):
            raise AssertionError("the TMA kernel was launched")

    monkeypatch.setattr(L, "decode_attention_tma_kernel", NotLaunched())
    monkeypatch.setattr(L, "decode_attention_tma_host_kernel", NotLaunched())
    for mode in L.TMA_MODES:
        out = L.decode_attention(
            q, offset, v, lengths, out=utils.nan_empty((2, 4, 16)), schedule=TMA._replace(TMA=mode)
        )
        utils.check(out, ref, quiet=True)
    monkeypatch.setattr(L, "uses_tma", lambda: False)
    out = L.decode_attention_tma(q, k, v, lengths, out=utils.nan_empty((2, 4, 16)))
    utils.check(out, ref, quiet=True)


def test_whole_waves_round_the_splits_down():
    """WHOLE_WAVES: B KV n_splits never above the programs wanted (4 under the interpreter); the default rounds
    up, as before."""
    for B, KV, max_len in ((1, 1, 100), (1, 3, 100), (3, 1, 64), (2, 2, 30)):
        n_up, _, _ = L.decode_split(B, KV, max_len, schedule=TMA)
        n_down, split_len, BLOCK_N = L.decode_split(B, KV, max_len, schedule=TMA._replace(WHOLE_WAVES=True))
        target = ENV.pick(cpu=4, gpu=TMA.PROGRAMS_PER_SM * (ENV.sm_count or 132))
        assert B * KV * n_down <= max(target, B * KV) and n_down <= n_up
        assert split_len % BLOCK_N == 0 and n_down * split_len >= max_len


def test_the_decode_step_uses_tma_when_switched_on(monkeypatch):
    q, k, v, lengths = _decode_inputs(2, 4, 2, 16, 40, [40, 9])
    seen = []
    real = L.decode_attention_fused
    monkeypatch.setattr(L, "decode_attention_fused", lambda *a, schedule=None, **kw: seen.append(schedule) or real(
        *a, schedule=schedule, **kw))  # fmt: skip
    ref = L.decode_attention_ref(q.double(), k.double(), v.double(), lengths)
    for on in (False, True):
        monkeypatch.setattr(L, "USE_TMA_DECODE_ATTENTION", on)
        utils.check(L.decode_attention_step(q, k, v, lengths, out=utils.nan_empty((2, 4, 16))), ref, quiet=True)
    assert seen == [None, L.DECODE_ATTENTION_TMA_SCHEDULES[64]]


def test_decode_attention_tma_refuses_what_decode_attention_refuses():
    q, cache = torch.randn(1, 4, 16, device=ENV.device), torch.zeros(1, 8, 2, 16, device=ENV.device)
    lengths = torch.ones(1, dtype=torch.int32, device=ENV.device)
    utils.refuses(
        {
            "q of two dimensions": lambda: L.decode_attention_tma(q[0], cache, cache, lengths),
            "int64 lengths": lambda: L.decode_attention_tma(q, cache, cache, lengths.long()),
            "an out aliasing q": lambda: L.decode_attention_tma(q, cache, cache, lengths, out=q),
        },
        quiet=True,
    )


def test_an_unknown_tma_mode_is_refused_before_any_launch():
    q, k, v, lengths = _decode_inputs(1, 4, 2, 16, 40, [40])
    with pytest.raises(ValueError, match="DecodeSchedule.TMA must be"):
        L.decode_attention(q, k, v, lengths, schedule=TMA._replace(TMA="yes"))


@pytest.mark.parametrize("mode", L.TMA_MODES)
def test_generation_is_the_same_with_the_tma_kernels(tied, monkeypatch, mode):
    """The switch the sweep sets: the decode steps of a batch of prompts through the TMA kernels give the tokens
    the pointer kernel gives (whole waves split the keys otherwise: the same sums in another order)."""
    model, _ = tied
    ids = prompt(B=2, T=5)
    pointers = L.generate(model, ids, 6)
    # generate keeps its decode steps' CUDA graphs on the model: fresh ones, or the GPU replays the pointer kernel's
    monkeypatch.setattr(model, "decoders", {})
    monkeypatch.setattr(L, "USE_TMA_DECODE_ATTENTION", True)
    rows = {D: s._replace(TMA=mode) for D, s in L.DECODE_ATTENTION_TMA_SCHEDULES.items()}
    monkeypatch.setattr(L, "DECODE_ATTENTION_TMA_SCHEDULES", rows)
    launched, launch = [], L._tma_launch
    monkeypatch.setattr(L, "_tma_launch", lambda mode, *a: launched.append(mode) or launch(mode, *a))
    assert torch.equal(pointers, L.generate(model, ids, 6))
    assert launched and set(launched) == {mode}, "the decode steps did not go through the TMA kernels"


def test_a_combine_weighed_by_split_0s_max_is_named_where_its_weights_overflow(monkeypatch, tmp_path):
    """The combine weighing split i by exp2(m_i - m_0) passes where the splits' maxima lie close; where one lies
    ~128 (base 2) above split 0's, its weight is inf and the row NaN. On an H100 the check's scores-in-the-hundreds
    case did so in 3 of 16 rows, and got the NaN hint before _check_far_scores could name it: a suspect computes the
    same combine in fp32 (NaN rows and all). Here four splits of 80 keys, q scaled so that some rows overflow."""
    assert L.decode_split(1, 1, 300, head_dim=16)[0] > 1
    plant(
        monkeypatch,
        tmp_path,
        L,
        "decode_combine_kernel",
        (_SCALE, "scale = tl.exp2(m - tl.load(m_ptr + bh * n_splits))"),
    )
    with (
        torch.random.fork_rng(),
        pytest.raises(AssertionError, match=r"(?s)has NaN.*Hint: The combine weighed split i by exp2\(m_i - m_0\)"),
    ):
        torch.manual_seed(0)  # q x 300: some rows overflow at every seed tried (q x 100 left none at 3 seeds in 8)
        L.check_decode_attention(L.decode_attention, cases=[(1, 8, 1, 16, 300, [300], 300.0)], quiet=True)


# -- session 39: with a norm weight of 1 +- 0.1, the weight applied before the RMS moved a row by about 0.5 %, which
# bf16's tolerance let pass on a GPU (lesson 07's check_rmsnorm); the fused GEMVs' checks draw it as lesson 07 does --


def test_a_norm_weight_applied_before_the_rms_fails_the_decode_gemv_check_at_the_gpus_shape_in_bf16():
    """check_decode_gemv's GPU case (N = 2500, K = 2100) with the norm's weight drawn by norm_weight: rmsnorm(x * w)
    @ W.T, rounded to bf16 as a kernel's output is, is farther from rmsnorm(x) * w @ W.T than bf16's tolerance,
    in each of ten draws (with 1 +- 0.1 it is within it in every draw)."""
    tol = utils.checking.default_tolerance(torch.bfloat16)
    N, K = 2500, 2100
    for seed in range(10):
        torch.manual_seed(seed)
        x = torch.randn(1, K, dtype=torch.float64)
        w = torch.randn(N, K, dtype=torch.float64) / math.sqrt(K)
        norm = norm_weight(K, torch.bfloat16, "cpu").double()  # host math, on a GPU machine too
        ref = rmsnorm_ref(x, norm, 1e-5) @ w.T
        wrong = (rmsnorm_ref(x * norm, torch.ones_like(norm), 1e-5) @ w.T).to(torch.bfloat16).double()
        assert not torch.allclose(wrong, ref, rtol=tol.rtol, atol=tol.atol), f"seed {seed}"


def test_generate_keeps_only_the_decode_loops_used_last(tied, monkeypatch):
    """Each new max_len builds a decode loop (its KV cache, on a GPU its CUDA graph), and by default max_len follows
    the prompt's length: a chat's complete() calls built one more each, kept for the model's lifetime. At most
    MAX_DECODERS stay, the least recently used going first; a loop built again gives the same tokens."""
    model, _ = tied
    monkeypatch.setattr(model, "decoders", {})
    first = L.generate(model, prompt(B=1, T=3), 2)
    for T in range(4, 4 + L.MAX_DECODERS + 2):
        L.generate(model, prompt(B=1, T=T), 2)
        assert len(model.decoders) <= L.MAX_DECODERS
    recent = L.generate(model, prompt(B=1, T=T), 2, max_len=T + 2)  # the last key: used again, kept
    assert len(model.decoders) == L.MAX_DECODERS and list(model.decoders)[-1][1] == T + 2
    assert torch.equal(L.generate(model, prompt(B=1, T=3), 2), first)  # its loop went, and is built again
    assert torch.equal(L.generate(model, prompt(B=1, T=T), 2), recent)


GENERATE_PLANTED = {  # (session 53, held-out battery) mistake: (function, its edits, words of check_generate's hint)
    "the first decode position T - 1": (
        "generate",
        [("dec.pos.fill_(T)", "dec.pos.fill_(T - 1)")],
        "the first step's position is T",
    ),
    "the first decode position T + 1": (
        "generate",
        [("dec.pos.fill_(T)", "dec.pos.fill_(T + 1)")],
        "the first step's position is T",
    ),
    "prefill's logits of the prompt's first token": (
        "prefill",
        [("x[:, -1].contiguous()", "x[:, 0].contiguous()")],
        "Token 0 is drawn from prefill's logits",
    ),
    "the token drawn from prefill never stored": (
        "generate",  # out's torch.empty holds garbage, made an id past the vocabulary here so that it shows each run
        [
            ("    out[:, T] = dec.token\n", ""),
            ("out = torch.empty(B, T + max_new_tokens,", "out = torch.full((B, T + max_new_tokens), -1,"),
        ],
        "a place of out that the loop never wrote",
    ),  # fmt: skip
}


@pytest.mark.parametrize("mistake", list(GENERATE_PLANTED))
def test_check_generate_says_which_step_chose_the_wrong_token(mistake, tied, monkeypatch, tmp_path):
    """check_model passes each of these (it calls prefill with all_logits and gives decode_step its positions); the
    first three got check_generate's "Check the decode step: positions, the cache, the sampling", a wrong lead for
    token 0 (prefill's), and the last failed inside forward_ref ("index out of range in self")."""
    model, _ = tied
    name, edits, words = GENERATE_PLANTED[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    with pytest.raises(AssertionError, match=re.escape(words)):
        L.check_generate(model, quiet=True)
