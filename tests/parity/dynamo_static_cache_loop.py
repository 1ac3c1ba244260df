"""transformers.exporters' documented Dynamo static-cache decode loop, written out as the docs give
it (../shared/notes/transformers-exporters-api.md), run in its own process with nothing of hfexport
imported. argv: decode.pt2, the cache keyword (past_key_values, or cache as transformers 5.24
names it), the prompt's token ids (comma-separated), the number of new tokens. Prints the tokens,
the cache's cumulative_length after the loop, and whether its keys were written."""
import copy, sys
import torch
from transformers import StaticCache
from transformers.exporters.exporter_dynamo import register_pytree_node

register_pytree_node(StaticCache)
path, kwarg, prompt, n = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")], int(sys.argv[4])
exported = torch.export.load(path)
decode = exported.module()
_, example_kwargs = exported.example_inputs
past_key_values = copy.deepcopy(example_kwargs[kwarg])
past_key_values.reset()
max_cache_len = past_key_values.layers[0].keys.shape[2]

def causal_mask(positions, n):
    return (torch.arange(n)[None, :] <= positions[:, None])[None, None]

ids = torch.tensor([prompt]); pos = torch.arange(len(prompt))
tokens = []
ptr = past_key_values.layers[0].keys.data_ptr()
for _ in range(n):
    logits = decode(input_ids=ids, attention_mask=causal_mask(pos, max_cache_len), position_ids=pos[None],
                    **{kwarg: past_key_values}).logits
    t = int(logits[0, -1].argmax()); tokens.append(t)
    ids = torch.tensor([[t]]); pos = pos[-1:] + 1
assert past_key_values.layers[0].keys.data_ptr() == ptr
print(" ".join(map(str, tokens)), int(past_key_values.layers[0].cumulative_length), float(past_key_values.layers[0].keys.abs().sum()) > 0)
