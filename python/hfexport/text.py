"""Text in, text out for an export: its own tokenizer files (HF `tokenizers`' tokenizer.json), the
chat template from chat_template.jinja or tokenizer_config.json rendered with jinja2 the way
transformers renders it, and streaming decode (text is released once its bytes are complete)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

# transformers' clean_up_tokenization, applied when tokenizer_config.json asks for it.
_CLEANUPS = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]


class TextError(ValueError):
    pass


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class TextCodec:
    def __init__(self, directory: str | Path):
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        path = self.directory / "tokenizer.json"
        if not path.is_file():
            raise TextError(f"{self.directory}: no tokenizer.json (export a checkpoint that has a fast tokenizer, "
                            "or pass token ids)")
        self.tokenizer = Tokenizer.from_file(str(path))
        config_path = self.directory / "tokenizer_config.json"
        self.config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        self.clean_up = bool(self.config.get("clean_up_tokenization_spaces", False))

    # -- tokens ------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str], max_length: int | None = None, pad_to: int | None = None) -> dict:
        """Tokenizer(texts, padding=True, truncation=True) as numpy int64 arrays: input_ids,
        attention_mask, token_type_ids, padded with the tokenizer's pad token (on its padding side)
        to the longest text, or to `pad_to` (a graph of a fixed sequence length)."""
        import numpy as np

        pad = self.special_token("pad_token")
        pad_id = self.tokenizer.token_to_id(pad) if pad is not None else None
        if pad_id is None:
            if len(texts) > 1:
                raise TextError(f"{self.directory}: the tokenizer has no pad token to batch texts with")
            pad_id = 0
        side = self.config.get("padding_side", "right")
        self.tokenizer.enable_padding(direction=side if side in ("left", "right") else "right", pad_id=pad_id,
                                      pad_token=pad or "", length=pad_to)
        if max_length:
            self.tokenizer.enable_truncation(max_length)
        encodings = self.tokenizer.encode_batch(texts)
        return {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}

    def token(self, token_id: int) -> str:
        return self.tokenizer.id_to_token(int(token_id)) or str(int(token_id))

    def decode(self, ids) -> str:
        text = self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
        if self.clean_up:
            for a, b in _CLEANUPS:
                text = text.replace(a, b)
        return text

    def special_token(self, name: str) -> str | None:
        return _token_text(self.config.get(name))

    # -- chat ---------------------------------------------------------------------------------
    def chat_template(self) -> str:
        jinja_file = self.directory / "chat_template.jinja"
        if jinja_file.is_file():
            return jinja_file.read_text()
        template = self.config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            raise TextError(f"{self.directory}: the tokenizer has no chat template (chat_template.jinja or "
                            "tokenizer_config.json 'chat_template')")
        return template

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TextError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        specials = {name: self.special_token(name) for name in
                    ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token")}
        try:
            return env.from_string(self.chat_template()).render(
                messages=messages, add_generation_prompt=add_generation_prompt, **specials)
        except jinja2.TemplateError as e:
            raise TextError(f"chat template: {e}") from None

    def encode_prompt(self, prompt: str, chat: bool = False, system: str | None = None) -> list[int]:
        """A prompt's ids: as tokenizer(prompt), or (chat) as apply_chat_template(messages,
        add_generation_prompt=True), whose rendered text already holds the special tokens."""
        text, special_tokens = self.prompt_text(prompt, chat, system)
        return self.encode(text, add_special_tokens=special_tokens)

    def prompt_text(self, prompt: str, chat: bool = False, system: str | None = None,
                    images: int = 0) -> tuple[str, bool]:
        """The text encode_prompt tokenizes, and whether the tokenizer adds its special tokens. With
        `images` (chat), the user message's content is that many {"type": "image"} entries before
        the text, as a vision-language processor's chat template takes them."""
        if not chat:
            if system is not None:
                raise TextError("--system needs --chat")
            return prompt, True
        messages = ([{"role": "system", "content": system}] if system is not None else [])
        content = [{"type": "image"}] * images + [{"type": "text", "text": prompt}] if images else prompt
        messages.append({"role": "user", "content": content})
        return self.render_chat(messages), False


class TextStream:
    """Incremental decode of generated ids: feed() returns the text that became final."""

    def __init__(self, codec: TextCodec):
        self.codec = codec
        self.ids: list[int] = []
        self.emitted = 0

    def feed(self, token: int) -> str:
        self.ids.append(int(token))
        text = self.codec.decode(self.ids)
        if text.endswith("\ufffd"):  # a character whose bytes are still arriving
            return ""
        out, self.emitted = text[self.emitted:], len(text)
        return out

    def text(self) -> str:
        return self.codec.decode(self.ids)
