"""optimum's ORTModelFor<Task> over an hfexport ONNX encoder export (`--onnx-layout optimum`), as
its docs show it, run in the venv optimum-onnx needs (.venv-optimum-onnx: it pins transformers
< 4.58). argv: the export folder, the ORTModel class name, a JSON file of the inputs. Prints the
model's outputs {name: nested lists} as JSON on the last line."""
import json
import sys

import torch
import optimum.onnxruntime as ort_models

folder, class_name, request = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
model = getattr(ort_models, class_name).from_pretrained(folder)
out = model(**{k: torch.tensor(v) for k, v in request.items()})
names = ("last_hidden_state", "logits", "start_logits", "end_logits")
print(json.dumps({n: out[n].tolist() for n in names if n in out and out[n] is not None}))
