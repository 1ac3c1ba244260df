"""sentence-transformers' ONNX and OpenVINO backends in the venvs they need: version 5 (whose module
names Hub checkpoints carry) with both, in .venv-optimum-onnx (optimum-onnx and optimum-intel 1.27
pin transformers < 4.58); version 6 with OpenVINO's, in .venv-st6 (optimum-intel 2.2, transformers
5.5). Two commands, each printing JSON on its last line:

  build FOLDER MODE   a tiny random BERT (transformers 4.x) with a word-level tokenizer under
                      Pooling(MODE) and Normalize, saved as SentenceTransformer.save writes it;
                      prints its PyTorch encode of TEXTS (the reference)
  encode FOLDER BACKEND   SentenceTransformer(FOLDER, backend=BACKEND).encode(TEXTS), as its docs
                      show it; prints the embeddings and the model file the backend loaded
"""
import json
import sys
from pathlib import Path

import torch

TEXTS = ["w5 w6 w7 w8 w9 w10 w11", "w12 w13", "w20 w21 w22 w23", "w30"]
VOCAB = 160


def build(folder: Path, mode: str) -> list:
    import transformers
    from sentence_transformers import SentenceTransformer, models

    hf = folder.parent / (folder.name + "-hf")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=32)
    model = transformers.BertModel(config)
    with torch.no_grad():  # wider than the default init, so that every term shows
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.1) if name.endswith("bias") else p.uniform_(0.5, 1.5) if "LayerNorm" in name \
                else p.normal_(0.0, 0.08)
    model.save_pretrained(hf)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, VOCAB)]
    (hf / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizer(str(hf / "vocab.txt"), do_lower_case=False).save_pretrained(hf)
    transformer = models.Transformer(str(hf))
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode=mode)
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(folder))
    return SentenceTransformer(str(folder), device="cpu").encode(TEXTS).tolist()


def encode(folder: Path, backend: str) -> dict:
    from sentence_transformers import SentenceTransformer

    kwargs = {"model_kwargs": {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}} if backend == "openvino" else {}
    model = SentenceTransformer(str(folder), backend=backend, device="cpu", **kwargs)
    loaded = model[0].auto_model  # the ORTModel / OVModel the Transformer module runs
    path = getattr(loaded, "model_path", None) or getattr(loaded, "model_save_dir", None)
    return {"embeddings": model.encode(TEXTS).tolist(), "model_class": type(loaded).__name__, "path": str(path)}


if __name__ == "__main__":
    command, folder, arg = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    print(json.dumps(build(folder, arg) if command == "build" else encode(folder, arg)))
