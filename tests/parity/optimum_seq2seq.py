"""optimum's encoder-decoder classes over an hfexport export, as their docs show them:
ORTModelForSeq2SeqLM / ORTModelForSpeechSeq2Seq (optimum-onnx) over `--for-generation
--onnx-layout optimum`, OVModelForSeq2SeqLM / OVModelForSpeechSeq2Seq (optimum-intel) over
`--format openvino --for-generation`; run in the venv they need (.venv-optimum-onnx: optimum-onnx
pins transformers < 4.58). argv: the export folder, a JSON file {"class": "ORTModelForSeq2SeqLM",
"input_ids": [[...]], "attention_mask": [[...]]} or {"class": "ORTModelForSpeechSeq2Seq",
"input_features": "feats.npy"}, with "max_new_tokens" and generate's other keyword arguments under
"generate". Prints generate's token ids (and the ONNX decoder files optimum loaded) as JSON on the
last line."""
import json
import sys

import numpy as np
import torch

folder, request = sys.argv[1], json.load(open(sys.argv[2]))
if request["class"].startswith("OV"):
    import optimum.intel as classes

    # float32 inference: the parity contract is against transformers' float32 logits.
    options = {"ov_config": {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}}
else:
    import optimum.onnxruntime as classes

    options = {}
model = getattr(classes, request["class"]).from_pretrained(folder, **options)
if "input_features" in request:
    inputs = {"input_features": torch.from_numpy(np.load(request["input_features"]))}
else:
    inputs = {"input_ids": torch.tensor(request["input_ids"]), "attention_mask": torch.tensor(request["attention_mask"])}
out = model.generate(**inputs, max_new_tokens=request["max_new_tokens"], do_sample=False, **request.get("generate", {}))
result = {"ids": out.tolist()}
if not request["class"].startswith("OV"):
    sessions = {"decoder": model.decoder.session._model_path, "decoder_with_past": model.decoder_with_past.session._model_path}
    result["sessions"] = {k: str(v).rsplit("/", 1)[-1] for k, v in sessions.items()}
print(json.dumps(result))
