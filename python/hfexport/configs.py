"""Export configs shaped like transformers.exporters' (`OnnxConfig`, `OpenVINOConfig`, `Dim`,
`AutoExportConfig`), translated into the one export contract of the C++ core (the JSON object
`export.json` records as `export_config`). The translation is the only logic here: the core
validates the result and does the export."""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from .formats import ExportFormat, by_config_name, declarations, resolve

# The decoder inputs whose axes name the graphs' dims: axis -> dim name.
_INPUT_AXES = {"input_ids": ("batch", "sequence"), "attention_mask": ("batch", "sequence"),
               "position_ids": ("batch", "sequence"), "inputs_embeds": ("batch", "sequence")}
_DTYPES = {"float32", "float16", "bfloat16"}


class ConfigError(ValueError):
    """An export config field hfexport cannot honour: says which field and why."""


class Dim:
    """A symbolic dim with optional bounds, like `torch.export.Dim(name, min=, max=)` (which is
    accepted too): `Dim("batch", min=1, max=8)`. `Dim.AUTO` / `Dim.DYNAMIC` leave the bounds to
    the exporter."""

    AUTO: "Dim"
    DYNAMIC: "Dim"

    def __init__(self, name: str, *, min: int | None = None, max: int | None = None):  # noqa: A002
        self.__name__ = name
        self.min, self.max = min, max

    def __repr__(self) -> str:
        return f"Dim({self.__name__!r}, min={self.min}, max={self.max})"


Dim.AUTO = Dim("AUTO")
Dim.DYNAMIC = Dim("DYNAMIC")


def _bounds(dim: Any, where: str) -> tuple[int | None, int | None] | None:
    """(min, max) of a dynamic dim (None for a bound left open); None for a static one."""
    if dim is None or isinstance(dim, int):
        return None
    if dim is Dim.AUTO or dim is Dim.DYNAMIC or type(dim).__name__ == "_DimHint":
        if "STATIC" in repr(dim):
            return None
        return (None, None)
    if not hasattr(dim, "min") or not hasattr(dim, "max"):
        raise ConfigError(f"dynamic_shapes: {where} must be a Dim (hfexport.Dim or torch.export.Dim), "
                          f"Dim.AUTO, an int or None; got {dim!r}")
    low = dim.min if isinstance(dim.min, int) and dim.min > 1 else None  # torch's default min is 0
    high = dim.max if isinstance(dim.max, int) else None  # torch's default max is int_oo
    return (low, high)


def dims_from_dynamic_shapes(dynamic_shapes: Mapping[str, Any], sample_shapes: Mapping[str, tuple]) -> dict:
    """The core's `dims` ({name: {min, max}}) from transformers-style `dynamic_shapes`
    ({input: {axis: Dim}}); axes left out are fixed to the sample input's size."""
    dims: dict[str, dict] = {}
    dynamic: dict[str, tuple] = {}
    for name, axes in dynamic_shapes.items():
        if name not in _INPUT_AXES:
            raise ConfigError(f"dynamic_shapes: '{name}' is not an input of the export "
                              f"(it takes {', '.join(_INPUT_AXES)})")
        if isinstance(axes, (list, tuple)):
            axes = dict(enumerate(axes))
        if not isinstance(axes, Mapping):
            raise ConfigError(f"dynamic_shapes['{name}'] must map axes to dims, got {axes!r}")
        for axis, dim in axes.items():
            if axis not in (0, 1):
                shape = "[batch, sequence, hidden]: the hidden size is fixed" if name == "inputs_embeds" else "[batch, sequence]"
                raise ConfigError(f"dynamic_shapes['{name}']: axis {axis!r} is not a dynamic axis ({name} is {shape})")
            bounds = _bounds(dim, f"dynamic_shapes['{name}'][{axis}]")
            if bounds is None:
                continue
            dim_name = _INPUT_AXES[name][axis]
            if dim_name in dynamic and dynamic[dim_name] != bounds:
                raise ConfigError(f"dynamic_shapes: the {dim_name} axis is given different bounds by two inputs "
                                  f"({dynamic[dim_name]} and {bounds}): the inputs share it")
            dynamic[dim_name] = bounds
    for dim_name, (low, high) in dynamic.items():
        if low is not None or high is not None:  # else the exporter's default bounds
            dims[dim_name] = {"min": low or 1, **({"max": high} if high is not None else {})}
    for dim_name, size in _sample_dims(sample_shapes).items():
        if dim_name not in dynamic:
            dims[dim_name] = {"min": size, "max": size}
    return dims


def _sample_dims(sample_shapes: Mapping[str, tuple]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for name, shape in sample_shapes.items():
        for axis, dim_name in enumerate(_INPUT_AXES.get(name, ())):
            if axis < len(shape):
                sizes.setdefault(dim_name, int(shape[axis]))
    return sizes


def static_dims(sample_shapes: Mapping[str, tuple]) -> dict:
    """`dynamic=False`: every dim fixed to the sample inputs' sizes."""
    return {name: {"min": size, "max": size} for name, size in _sample_dims(sample_shapes).items()}


@dataclass
class WeightQuantizer:
    """hfexport's weight quantization (the `quantizer` field): `weights` "int4" or "int8",
    symmetric per `group_size` input features; `compute` "auto", "int8" or "float"."""

    weights: str = "int4"
    group_size: int = 32
    compute: str = "auto"

    def to_core(self) -> dict:
        return {"weights": self.weights, "group_size": self.group_size, "compute": self.compute}


def _checked_fields(cls):
    """A dataclass whose constructor names an unknown field in one line (ConfigError) and then
    validates the values (`_validate`)."""
    cls = dataclass(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    init = cls.__init__

    @functools.wraps(init)
    def checked_init(self, *args, **kwargs):
        for key in kwargs:
            if key not in names:
                raise ConfigError(f"{cls.__name__}: unknown field '{key}' (fields: {', '.join(names)})")
        init(self, *args, **kwargs)
        self._validate()

    cls.__init__ = checked_init
    return cls


@_checked_fields
class ExportConfigMixin:
    """Fields every format shares, named as transformers.exporters names them; hfexport's own
    (`dtype`, `decompose`) after them."""

    export_format: str = ""
    dynamic: bool = False
    strict: bool = False  # no tracing here: accepted, nothing to be strict about
    dynamic_shapes: dict | None = None
    prefer_deferred_runtime_asserts_over_guards: bool = False  # likewise (no guards without tracing)
    quantizer: Any = None
    dtype: str | None = None  # float32 (default), float16 or bfloat16; a torch dtype is accepted
    decompose: list = field(default_factory=list)  # high-level ops exported as their reference decomposition

    @classmethod
    def from_dict(cls, config_dict: Mapping[str, Any]) -> "ExportConfigMixin":
        return cls(**dict(config_dict))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def to_json_string(self) -> str:
        values = {k: v for k, v in self.__dict__.items() if k != "quantizer"}
        return json.dumps(values, indent=2, sort_keys=True, default=repr)

    def __iter__(self):
        yield from self.__dict__.items()

    def _validate(self) -> None:
        expected = type(self).__dataclass_fields__["export_format"].default
        self.export_format = str(getattr(self.export_format, "value", self.export_format))
        if self.export_format != expected:
            raise ConfigError(f"{type(self).__name__}: export_format must be '{expected}', got {self.export_format!r}")
        for flag in ("dynamic", "strict", "prefer_deferred_runtime_asserts_over_guards"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{type(self).__name__}: {flag} must be True or False")
        if self.dynamic_shapes is not None and not isinstance(self.dynamic_shapes, Mapping):
            raise ConfigError(f"{type(self).__name__}: dynamic_shapes must map input names to {{axis: Dim}}")
        if self.dtype is not None:
            self.dtype = str(self.dtype).removeprefix("torch.")
            if self.dtype not in _DTYPES:
                raise ConfigError(f"{type(self).__name__}: dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.quantizer is not None and not isinstance(self.quantizer, (WeightQuantizer, Mapping)):
            raise ConfigError(f"{type(self).__name__}: quantizer {type(self.quantizer).__name__} is not supported: "
                              "hfexport quantizes weights itself; pass hfexport.WeightQuantizer(weights='int4'|'int8')")

    # -- translation to the core's export config -------------------------------------------------
    def core_format(self) -> str:
        return self.export_format

    def core_dtype(self) -> str:
        return self.dtype or "float32"

    def core_backend(self, generation: bool) -> dict:
        return {"decompose": list(self.decompose)} if self.decompose else {}

    def core_quantization(self) -> dict | None:
        if self.quantizer is None:
            return None
        return self.quantizer.to_core() if isinstance(self.quantizer, WeightQuantizer) else dict(self.quantizer)

    def check_generation(self) -> None:
        """Refuses what a generation export of this format cannot honour."""


# ONNX's op profiles by ort_fusions: onnxruntime's CPU kernels, or plain ai.onnx ops.
_ORT_FUSIONS = {None: ("standard", "standard"), "cpu": ("ort", "ort-gqa")}
ONNX_OPSET = 23


@_checked_fields
class OnnxConfig(ExportConfigMixin):
    """transformers.exporters' OnnxConfig: `ort_fusions="cpu"` writes onnxruntime's fused CPU
    kernels (and, for generation, one decode graph whose GroupQueryAttention shares the cache
    buffer in place); None keeps to standard ai.onnx ops. `op_profile` names hfexport's profile
    directly (standard, ort, ort-gqa)."""

    export_format: str = "onnx"
    opset_version: int | None = None
    optimize: bool = True  # the graph is written optimized either way
    ort_fusions: str | None = None
    op_profile: str | None = None

    def _validate(self) -> None:
        super()._validate()
        if self.opset_version not in (None, ONNX_OPSET):
            raise ConfigError(f"OnnxConfig: opset_version {self.opset_version} is not supported: hfexport writes "
                              f"ONNX opset {ONNX_OPSET}")
        if self.ort_fusions not in _ORT_FUSIONS:
            raise ConfigError(f"OnnxConfig: ort_fusions {self.ort_fusions!r} is not supported: hfexport fuses for "
                              "onnxruntime's CPU kernels ('cpu') or writes standard ops (None)")
        if self.ort_fusions is not None and not self.optimize:
            raise ConfigError("OnnxConfig: ort_fusions requires optimize=True")
        if self.op_profile is not None and self.ort_fusions is not None:
            raise ConfigError("OnnxConfig: give op_profile or ort_fusions, not both")

    def core_backend(self, generation: bool) -> dict:
        out = super().core_backend(generation)
        out["op_profile"] = self.op_profile or _ORT_FUSIONS[self.ort_fusions][1 if generation else 0]
        return out


@_checked_fields
class OpenVINOConfig(ExportConfigMixin):
    """transformers.exporters' OpenVINOConfig: `compress_to_fp16` stores the weights as float16
    (computed in float32), `stateful` keeps the generation cache in the model's variables (the only
    generation form hfexport writes for OpenVINO)."""

    export_format: str = "openvino"
    compress_to_fp16: bool = False
    stateful: bool = True

    def _validate(self) -> None:
        super()._validate()
        if self.compress_to_fp16 and self.dtype not in (None, "float16"):
            raise ConfigError(f"OpenVINOConfig: compress_to_fp16 stores float16 weights, but dtype is {self.dtype!r}")

    def core_dtype(self) -> str:
        return "float16" if self.compress_to_fp16 else super().core_dtype()

    def check_generation(self) -> None:
        if not self.stateful:
            raise ConfigError("OpenVINOConfig: stateful=False is not supported for generation: hfexport's OpenVINO "
                              "generation model keeps the KV cache in ReadValue/Assign variables")


@_checked_fields
class DynamoConfig(ExportConfigMixin):
    """transformers.exporters' DynamoConfig: a torch.export program (`.pt2`, hfexport's `pt2`
    format), written without tracing: every component's program in one archive, weights stored
    once; a static cache is updated in place in the caller's tensors."""

    export_format: str = "dynamo"
    # The keyword a static-cache decode program takes its transformers StaticCache by (the
    # documented loop's past_key_values, or cache as transformers 5.24 names it); None: the cache
    # tensors as flat keyword arguments (past_key_values_0_key, ...), no transformers needed to call it.
    cache_kwarg: str | None = "past_key_values"

    def _validate(self) -> None:
        super()._validate()
        if self.cache_kwarg not in (None, "past_key_values", "cache"):
            raise ConfigError(f"DynamoConfig: cache_kwarg must be 'past_key_values', 'cache' or None, "
                              f"got {self.cache_kwarg!r}")

    def core_format(self) -> str:
        return "pt2"


# The ExecuTorch backends hfexport writes: XNNPACK-delegated linears (transformers.exporters'
# default), or the runtime's portable/optimized ATen kernels only.
_EXECUTORCH_BACKENDS = ("xnnpack", "portable")


@_checked_fields
class ExecutorchConfig(ExportConfigMixin):
    """transformers.exporters' ExecutorchConfig: a .pte program (hfexport's `executorch` format),
    written without tracing; `backend` "xnnpack" delegates the linears to XNNPACK, "portable" runs
    only ExecuTorch's portable/optimized ATen kernels. A generation export keeps its static cache
    as mutable buffers of the `forward` method; with `alloc_graph_input=False,
    alloc_graph_output=False` (and `alloc_mutable_buffers=False`, as transformers' zero-copy
    recipe sets it) the inputs and outputs get no planned memory and the cache is the caller's:
    inputs [input_ids, attention_mask, position_ids, cache x N], outputs [cache x N, logits,
    cache x N], written in place once the caller binds output N + 1 + i onto cache input i
    (`Method::set_output_data_ptr`)."""

    export_format: str = "executorch"
    backend: str = "xnnpack"
    # "hfexport": attention runs hfexport's kernel library (reads the cache in place), which the
    # program then needs at run time; "stock": only kernels every ExecuTorch runtime has.
    kernels: str = "stock"
    alloc_graph_input: bool = True
    alloc_graph_output: bool = True
    alloc_mutable_buffers: bool = True

    def _validate(self) -> None:
        super()._validate()
        if self.backend not in _EXECUTORCH_BACKENDS:
            raise ConfigError(f"ExecutorchConfig: backend {self.backend!r} is not one of "
                              f"{', '.join(_EXECUTORCH_BACKENDS)}")
        if self.kernels not in ("stock", "hfexport"):
            raise ConfigError(f"ExecutorchConfig: kernels {self.kernels!r} is not one of stock, hfexport")
        for field in ("alloc_graph_input", "alloc_graph_output", "alloc_mutable_buffers"):
            if not isinstance(getattr(self, field), bool):
                raise ConfigError(f"ExecutorchConfig: {field} must be True or False, got {getattr(self, field)!r}")
        if self.alloc_graph_input != self.alloc_graph_output:
            raise ConfigError("ExecutorchConfig: alloc_graph_input and alloc_graph_output must be equal: hfexport "
                              "plans both (the default) or neither (the zero-copy interface)")
        if self.alloc_graph_input and not self.alloc_mutable_buffers:
            raise ConfigError("ExecutorchConfig: alloc_mutable_buffers=False needs alloc_graph_input=False and "
                              "alloc_graph_output=False: hfexport's cache is a planned mutable buffer, or the "
                              "caller's (no planned memory at all)")

    def core_backend(self, generation: bool) -> dict:
        out = super().core_backend(generation)
        out["executorch_backend"] = self.backend
        if self.kernels != "stock":
            out["executorch_kernels"] = self.kernels
        if not self.alloc_graph_input:
            out["alloc_graph_io"] = False
        return out


def config_format(export_format: Any) -> ExportFormat:
    """The declaration of the format transformers.exporters calls `export_format` (a name or its enum)."""
    name = str(getattr(export_format, "value", export_format))
    found = by_config_name(name)
    if found is None:
        known = ", ".join(f.config_name for f in declarations() if f.config)
        raise ConfigError(f"unknown export format {name!r} (formats: {known})")
    return found


def config_class_for(export_format: Any) -> type[ExportConfigMixin]:
    return resolve(config_format(export_format).config)


class AutoExportConfig:
    """`AutoExportConfig.from_dict({"export_format": "onnx", "dynamic": True})` -> OnnxConfig."""

    @classmethod
    def from_dict(cls, export_config_dict: Mapping[str, Any]) -> ExportConfigMixin:
        if "export_format" not in export_config_dict:
            raise ConfigError("AutoExportConfig.from_dict: 'export_format' is missing")
        return config_class_for(export_config_dict["export_format"]).from_dict(export_config_dict)
