"""Random-weight VLM checkpoints built from a config: tiny ones for tests, full-size ones for GPU benchmarks.

Nothing is downloaded: the tokenizer is a byte-level BPE trained in-process on a few robot
instructions, the weights are the model's random initialisation. The result is an ordinary
``save_pretrained`` directory, so the policies load it through the same ``from_pretrained`` code
that loads a real checkpoint::

    >>> from random_vlms import build_vlm       # tests/ on sys.path (benchmarks/bench_vla_gpu.py loads it by path)
    >>> path = build_vlm("/tmp/tiny-paligemma", family="paligemma", size="tiny")      # doctest: +SKIP
    >>> policy = make_policy("vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy",
    ...                      env.observation_space, env.action_space, model=path)      # doctest: +SKIP

Families: ``paligemma`` (SigLIP + Gemma, the OpenVLA-style recipe's default), ``smolvlm``
(Idefics3: SigLIP + Llama with a chat template) and ``pi0`` (PaliGemma + a Gemma action expert for
:class:`~vla_gym.trainers.policies.vla_pi0.PI0Policy`). Sizes: ``tiny`` (2 layers, width 32-64; a
forward pass takes milliseconds on a CPU) and ``full`` (PaliGemma-3B / SmolVLM-2.2B / PI0 layer
shapes, for :mod:`benchmarks.bench_vla_gpu`; the full vocabulary is kept so the action-token
range and the LM head are realistic).
"""
from __future__ import annotations

import pathlib

FAMILIES = ("paligemma", "smolvlm", "pi0")
SIZES = ("tiny", "full")

_CORPUS = [
    f"In: What action should the robot take to {text}?\nOut:"
    for text in (
        "push the cube to the goal region", "pick up the red cube and move it to the goal position",
        "put the black bowl on the plate", "open the top drawer of the cabinet", "turn on the stove",
        "stack the red cube on top of the green cube", "pick up the trash and put it in the bin",
    )
]
_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>"]


def train_tokenizer(vocab_size: int = 400, extra_special: tuple[str, ...] = ()):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on robot instructions (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=_SPECIAL + list(extra_special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
    )


def _paligemma_parts(size: str, image_size: int):
    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PaliGemmaProcessor,
        SiglipImageProcessor,
        SiglipVisionConfig,
    )

    if size == "tiny":
        patch, vision = 16, {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
        text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "head_dim": 32}
    else:  # PaliGemma-3B (SigLIP-So400m/14 + Gemma-2B)
        patch, vision = 14, {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16}
        text = {"hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8,
                    "num_key_value_heads": 1, "head_dim": 256}
    num_patches = (image_size // patch) ** 2
    image_processor = SiglipImageProcessor(size={"height": image_size, "width": image_size})
    image_processor.image_seq_length = num_patches
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=train_tokenizer())
    tokenizer = processor.tokenizer
    vocab = len(tokenizer) if size == "tiny" else 257216
    config = PaliGemmaConfig(
        vision_config=SiglipVisionConfig(image_size=image_size, patch_size=patch, **vision).to_dict(),
        text_config=GemmaConfig(vocab_size=vocab, **text).to_dict(),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=text["hidden_size"], vocab_size=vocab,
    )
    config.text_config.pad_token_id = tokenizer.pad_token_id
    return config, processor


def _smolvlm_parts(size: str, image_size: int):
    from transformers import (
        Idefics3Config,
        Idefics3ImageProcessor,
        Idefics3Processor,
        Idefics3VisionConfig,
        LlamaConfig,
    )

    if size == "tiny":
        patch, scale = 16, 2
        vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
        text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                    "num_key_value_heads": 1}
    else:  # SmolVLM-Instruct (2.2B: SigLIP-So400m + SmolLM2-1.7B)
        patch, scale = 14, 3
        vision = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16}
        text = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24, "num_attention_heads": 32,
                    "num_key_value_heads": 32}
    tokenizer = train_tokenizer(extra_special=("<image>", "<fake_token_around_image>", "<global-img>",
                                               "<end_of_utterance>"))
    image_processor = Idefics3ImageProcessor(
        do_image_splitting=False, size={"longest_edge": image_size}, max_image_size={"longest_edge": image_size},
    )
    seq_len = (image_size // patch) ** 2 // (scale * scale)
    template = (
        "{% for message in messages %}{{ message['role'] | capitalize }}:"
        "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>{% else %}"
        " {{ part['text'] }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
        "{% if add_generation_prompt %}Assistant:{% endif %}"
    )
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=seq_len,
                                  chat_template=template)
    vocab = len(tokenizer) if size == "tiny" else 49280
    config = Idefics3Config(
        vision_config=Idefics3VisionConfig(image_size=image_size, patch_size=patch, **vision).to_dict(),
        text_config=LlamaConfig(vocab_size=vocab, pad_token_id=tokenizer.pad_token_id, **text).to_dict(),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), scale_factor=scale,
    )
    return config, processor


def build_vlm(path: str | pathlib.Path, family: str = "paligemma", size: str = "tiny", image_size: int | None = None,
              seed: int = 0, device: str = "cpu", dtype: str = "float32", **pi0_kwargs) -> pathlib.Path:
    """Write a random-weight ``family`` model + processor to ``path`` (``save_pretrained``) and return it.

    ``device="cuda"`` initialises a full-size model on the GPU (minutes faster than on a CPU); ``dtype``
    is the dtype the weights are saved in (``bfloat16`` halves a 3B model's 12 GB).
    """
    import torch

    if family not in FAMILIES or size not in SIZES:
        raise ValueError(f"family must be one of {FAMILIES} and size one of {SIZES}, got {family!r}, {size!r}")
    path = pathlib.Path(path)
    torch.manual_seed(seed)
    if family == "pi0":
        return build_pi0(path, size=size, image_size=image_size, seed=seed, device=device, dtype=dtype, **pi0_kwargs)
    if family == "paligemma":
        from transformers import PaliGemmaForConditionalGeneration as cls

        config, processor = _paligemma_parts(size, image_size or (32 if size == "tiny" else 224))
    else:
        from transformers import Idefics3ForConditionalGeneration as cls

        config, processor = _smolvlm_parts(size, image_size or (32 if size == "tiny" else 384))
    with torch.device(device):
        model = cls(config)
    model.to(getattr(torch, dtype)).save_pretrained(path)
    processor.save_pretrained(path)
    return path


def build_pi0(path: str | pathlib.Path, size: str = "tiny", image_size: int | None = None, seed: int = 0,
              chunk_size: int | None = None, device: str = "cpu", dtype: str = "float32") -> pathlib.Path:
    """Write a random-weight PI0 (PaliGemma + Gemma action expert) and its tokenizer to ``path``."""
    import torch
    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PI0Config,
        PI0ForConditionalGeneration,
        SiglipVisionConfig,
    )

    torch.manual_seed(seed)
    if size == "tiny":
        image_size, patch = image_size or 32, 16
        vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
        layers = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}
        vlm_width, expert_width, vocab_pad, chunk_size = 32, 32, None, chunk_size or 4
    else:  # openpi's PI0: PaliGemma-3B + a 300M Gemma expert (width 1024) sharing layer/head shapes
        image_size, patch = image_size or 224, 14
        vision = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16}
        layers = {"num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256}
        vlm_width, expert_width, vocab_pad, chunk_size = 2048, 1024, 257152, chunk_size or 50
    tokenizer = train_tokenizer(extra_special=("<image>",))
    vocab = vocab_pad or len(tokenizer)
    vlm = PaliGemmaConfig(
        vision_config=SiglipVisionConfig(image_size=image_size, patch_size=patch, **vision).to_dict(),
        text_config=GemmaConfig(vocab_size=vocab, hidden_size=vlm_width, intermediate_size=4 * vlm_width,
                                **layers).to_dict(),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"), projection_dim=vlm_width, vocab_size=vocab,
    )
    dit = GemmaConfig(vocab_size=vocab, hidden_size=expert_width, intermediate_size=4 * expert_width, **layers)
    config = PI0Config(vlm_config=vlm.to_dict(), dit_config=dit.to_dict(), chunk_size=chunk_size)
    path = pathlib.Path(path)
    with torch.device(device):
        model = PI0ForConditionalGeneration(config)
    model.to(getattr(torch, dtype)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
