"""bench_encoders.py's helper in the peers' venv (.venv-optimum-onnx: transformers 4.57,
sentence-transformers 5.7, optimum-onnx, optimum-intel). Prints JSON on its last line.

  build FOLDER HIDDEN LAYERS HEADS INTERMEDIATE SEED
      a random-weight BERT (float32, vocab 30522, 512 positions) with a word-level WordPiece
      vocabulary, saved as a sentence-transformers checkpoint (Transformer, mean Pooling,
      Normalize), the layout all-MiniLM-L6-v2 has on the Hub
  st-save FOLDER BACKEND OUT
      SentenceTransformer(FOLDER, backend=BACKEND) (sentence-transformers exports the model with
      optimum as it loads) then save_pretrained(OUT): its own export, as its docs tell users to keep
  st-encode FOLDER BACKEND BATCH SEQUENCE REPEATS
      SentenceTransformer(FOLDER, backend=BACKEND).encode over BATCH texts of SEQUENCE tokens:
      the median seconds per call of REPEATS timed calls after one warm-up (tokenization
      included, as users call it). OpenVINO compiles with INFERENCE_PRECISION_HINT f32.
"""
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

VOCAB = 30522


def build(folder: Path, hidden: int, layers: int, heads: int, intermediate: int, seed: int) -> dict:
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer, models

    hf = folder / "_hf"
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=intermediate,
                                     max_position_embeddings=512)
    transformers.BertModel(config).save_pretrained(hf)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, VOCAB)]
    (hf / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizerFast(str(hf / "vocab.txt"), do_lower_case=False).save_pretrained(hf)
    transformer = models.Transformer(str(hf), max_seq_length=512)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(folder))
    shutil.rmtree(hf)
    return {"folder": str(folder)}


def st_save(folder: Path, backend: str, out: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(str(folder), backend=backend, device="cpu").save_pretrained(str(out))
    return {"folder": str(out)}


def st_encode(folder: Path, backend: str, batch: int, sequence: int, repeats: int) -> dict:
    from sentence_transformers import SentenceTransformer

    kwargs = {"model_kwargs": {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}} if backend == "openvino" else {}
    model = SentenceTransformer(str(folder), backend=backend, device="cpu", **kwargs)
    # [CLS] + words + [SEP]: SEQUENCE tokens per text.
    texts = [" ".join(f"w{5 + (7 * row + i) % (VOCAB - 5)}" for i in range(sequence - 2)) for row in range(batch)]
    assert len(model.tokenizer(texts[0])["input_ids"]) == sequence
    model.encode(texts, batch_size=batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.encode(texts, batch_size=batch)
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "model_class": type(model[0].auto_model).__name__}


if __name__ == "__main__":
    command, folder, *rest = sys.argv[1:]
    if command == "build":
        print(json.dumps(build(Path(folder), *map(int, rest))))
    elif command == "st-save":
        print(json.dumps(st_save(Path(folder), rest[0], Path(rest[1]))))
    else:
        print(json.dumps(st_encode(Path(folder), rest[0], *map(int, rest[1:]))))
