"""Decode loop over a stateful OpenVINO export (Python API). The KV cache lives in the model's
ReadValue/Assign variables: prefill resets them, each run appends to them, and beam_idx (identity
here: no beam search) reorders them."""

from __future__ import annotations

import numpy as np
import openvino as ov

from .cache_driver import DynamicCache, Session
from .manifest import CACHE_STATEFUL, ENCODER, PREFILL, ExportManifest
from .runner import GenerationError
from .versions import check_runtime_versions


# f32 inference by default: the parity contract is against transformers' float32 logits. The
# CPU plugin keeps its fused KV cache in u8/f16 by default; f32 matches transformers.
F32_INFERENCE = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
# Ops a head may apply after its MatMul (logit softcapping, scaling, a bias): walked through to find it.
HEAD_TAIL_OPS = {"Multiply", "Divide", "Tanh", "Add", "Convert"}


def slice_before_head(model: ov.Model) -> ov.Model:
    """The decode loop reads only the last position's logits: cut the hidden states to it before the
    LM head's MatMul, as OpenVINO GenAI does at load, so a prompt of S tokens skips S-1 vocabulary-sized
    rows. The file keeps every position's logits; a head of another shape is left as it is."""
    node = model.output("logits").get_node().input_value(0).get_node()
    while node.get_type_name() in HEAD_TAIL_OPS:
        varying = [v for v in node.input_values() if v.get_node().get_type_name() != "Constant"]
        if len(varying) != 1:
            return model
        node = varying[0].get_node()
    if node.get_type_name() != "MatMul" or node.get_attributes().get("transpose_a"):
        return model
    hidden = node.input_value(0)
    if hidden.get_partial_shape().rank != ov.Dimension(3) or hidden.get_node().get_type_name() == "Constant":
        return model
    import openvino.opset8 as ops

    last = ops.slice(hidden, np.array([-1], np.int64), np.array([np.iinfo(np.int64).max], np.int64),
                     np.array([1], np.int64), np.array([1], np.int64))
    node.input(0).replace_source_output(last.output(0))
    model.validate_nodes_and_infer_types()
    return model


class OpenVinoSession(Session):
    """The step component compiled once; its infer request holds the cache in its variables."""

    holds_state = True

    def __init__(self, manifest: ExportManifest, step: str, device: str = "CPU", config: dict | None = None):
        super().__init__()
        check_runtime_versions(manifest.data, ["openvino"])
        if manifest.cache != CACHE_STATEFUL:
            raise GenerationError(f"{manifest.directory}: OpenVINO export is not a stateful generation model")
        self.config = F32_INFERENCE if config is None else config
        self.device = device
        core = ov.Core()
        self.compiled = core.compile_model(slice_before_head(core.read_model(str(manifest.file_of(step)))),
                                           device, self.config)
        self.request = self.compiled.create_infer_request()
        self.step_inputs = {i.get_any_name() for i in self.compiled.inputs}

    def open_encoder(self, manifest: ExportManifest) -> None:
        """An encoder-decoder export (hfexport.seq2seq), laid out as optimum-intel writes it and
        OpenVINO GenAI's WhisperPipeline runs it: every decoder call takes the encoder's
        last_hidden_state (and padding), from which the decoder's first call after a reset
        projects the cross-attention state into its variables, beside the self-attention cache.
        (An older export's decoder reads the encoder's state outputs instead.)"""
        from .seq2seq import cross_state_names

        self.encoder = ov.Core().compile_model(str(manifest.file_of(ENCODER)), self.device, self.config)
        self.projects_cross_state = "encoder_hidden_states" in self.step_inputs
        self.cross = [] if self.projects_cross_state else cross_state_names(manifest)

    def has(self, component: str) -> bool:
        return component != PREFILL  # the step graph runs the prompt too

    def input_names(self, component: str) -> set[str]:
        return self.step_inputs

    def empty_states(self, batch: int) -> dict:
        return {}

    def reset(self) -> None:
        self.request.reset_state()

    def encode(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from .seq2seq import decoder_feeds, encoder_results

        result = self.encoder(inputs)
        outputs = {out.get_any_name(): np.asarray(value) for out, value in result.items()}
        self.fixed = decoder_feeds(self.cross, outputs, inputs, self.step_inputs)
        if self.projects_cross_state:
            self.fixed["encoder_hidden_states"] = outputs["last_hidden_state"]
        return encoder_results(self.cross, outputs)

    def run(self, component: str, feeds: dict, states: dict) -> tuple[np.ndarray, dict]:
        batch = len(feeds["attention_mask"])
        feeds = {**feeds, "beam_idx": np.arange(batch, dtype=np.int32), **self.fixed}
        # An encoder-decoder's stateful decoder counts its positions and masks nothing.
        self.request.infer({name: value for name, value in feeds.items() if name in self.step_inputs})
        return self.request.get_tensor("logits").data[:, -1].copy(), {}


class OpenVinoRunner(DynamicCache):
    """The decode loop: a stateful cache (the driver's) over an OpenVINO session."""

    SESSION = OpenVinoSession
