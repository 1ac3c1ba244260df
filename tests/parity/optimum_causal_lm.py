"""optimum's ORTModelForCausalLM over an hfexport ONNX export, as its docs show it, run in the
venv optimum-onnx needs (.venv-optimum-onnx: it pins transformers < 4.58). argv: the export
folder, a JSON file {"input_ids": [[...]], "attention_mask": [[...]], "max_new_tokens": n}.
Prints the new token ids of each row as JSON on the last line. Exits 3, printing both shapes,
when optimum's reading of the cache shape (kv heads, head size: from config.json, by model type)
is not the graph's: its first step's empty past would not fit (huggingface/optimum#2379)."""
import json
import sys

import torch
from optimum.onnxruntime import ORTModelForCausalLM

folder, request = sys.argv[1], json.load(open(sys.argv[2]))
model = ORTModelForCausalLM.from_pretrained(folder)
graph = model.input_shapes["past_key_values.0.key"]
reads = [model.num_key_value_heads, model.embed_size_per_head]
if reads != [graph[1], graph[3]]:
    print(json.dumps({"optimum_reads": reads, "graph": [graph[1], graph[3]]}))
    sys.exit(3)
ids = torch.tensor(request["input_ids"])
out = model.generate(input_ids=ids, attention_mask=torch.tensor(request["attention_mask"]),
                     max_new_tokens=request["max_new_tokens"], do_sample=False, pad_token_id=0)
print(json.dumps(out[:, ids.shape[1]:].tolist()))
