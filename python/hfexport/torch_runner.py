"""Runs .pt2 exports: their programs loaded with torch.export (the one archive holds every
component's program; torch.export.load returns the one named `model`), called as
``ep.module()(**kwargs)``. Two cache mechanics, as the manifest says:
- static: the program writes each step's rows into the caller's cache tensors in place (a
  user-input mutation, as transformers' Dynamo programs do): one zeroed buffer per cache input,
  passed on every call, never copied;
- dynamic: each call returns its present tensors, passed back as the next call's past."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .cache_driver import DynamicCache, Session, StaticCache
from .manifest import CACHE_STATIC, ENCODER, PREFILL, ExportManifest
from .runner import DecodeRunner, state_buffer_shape
from .versions import check_runtime_versions

_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def load_programs(path: Path) -> dict:
    """{program name: ExportedProgram} of a .pt2 archive (torch's own loader; its errors are
    raised as they are, not behind torch.export.load's generic one)."""
    from torch.export.pt2_archive._package import load_pt2

    import torch.utils._pytree as pytree

    register_cache_pytrees()  # the programs' output (and cache) structures name these types
    # An older transformers' output classes cannot take the programs' fields: hfexport reads the
    # programs through stand-ins then (the names map to them while the archive loads).
    overrides = _older_output_classes()
    saved = {name: pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[name] for name in overrides}
    pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.update(overrides)
    # Example inputs holding a transformers StaticCache load only through torch's weights_only=False
    # fallback, whose warning has a broken format string (a logging error, raised under pytest).
    quiet = [logging.getLogger(name) for name in ("torch.export", "torch._export.serde.serialize")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        return dict(load_pt2(str(path)).exported_programs)
    finally:
        pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.update(saved)
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)


def program_of(manifest: ExportManifest, component: str, programs: dict):
    return programs[manifest.component(component).get("program", "model")]


def register_cache_pytrees() -> None:
    """The pytree nodes the programs' structures name, as transformers registers them:
    transformers' ModelOutput classes (registered when transformers.modeling_outputs is
    imported) and its StaticCache and DynamicCache (as transformers.exporters registers them).
    Without transformers, the output classes are stand-ins that flatten the same way."""
    try:
        import transformers.modeling_outputs  # noqa: F401 - registers every ModelOutput class
        from transformers import DynamicCache, StaticCache
        from transformers.exporters.exporter_dynamo import register_pytree_node
    except ImportError:
        _register_stand_in_outputs()
        return
    for cache in (StaticCache, DynamicCache):
        register_pytree_node(cache)


_STAND_IN_OUTPUTS = ("CausalLMOutputWithPast", "CausalLMOutputWithCrossAttentions", "MoeCausalLMOutputWithPast")


def _register_stand_in_outputs() -> None:
    """Stand-ins for transformers' causal-LM output classes (dict-like) and its DynamicCache (a
    list of each layer's keys and values), registered under their serialized names, so that the
    programs load and run where transformers (or its exporters) is not installed."""
    import torch.utils._pytree as pytree

    for name in _STAND_IN_OUTPUTS:
        _registered_stand_in_output(name, f"transformers.modeling_outputs.{name}")
    if "transformers.cache_utils:DynamicCache" in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
        return
    layer = type("DynamicLayer", (), {"__init__": lambda self, k, v: self.__dict__.update(keys=k, values=v)})
    cache = type("DynamicCache", (), {"__init__": lambda self, layers: setattr(self, "layers", layers)})
    pytree.register_pytree_node(  # the context is read with json.loads
        cache, lambda o: ([t for layer in o.layers for t in (layer.keys, layer.values)], None),
        lambda values, _context: cache([layer(k, v) for k, v in zip(values[0::2], values[1::2])]),
        serialized_type_name="transformers.cache_utils:DynamicCache")


def _registered_stand_in_output(name: str, serialized: str) -> type:
    """The class registered under `serialized`, else a dict whose keys read as attributes (as a
    transformers ModelOutput's do), registered under it."""
    import torch.utils._pytree as pytree

    if serialized in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
        return pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[serialized]

    def getattr_(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    output = type(name, (dict,), {"__getattr__": getattr_})
    pytree.register_pytree_node(output, lambda o: (list(o.values()), list(o.keys())),
                                lambda values, keys: output(zip(keys, values)), serialized_type_name=serialized)
    return output


def _older_output_classes() -> dict[str, type]:
    """Serialized output names whose installed transformers class has no `cache` field (before
    5.24 it is `past_key_values`), each with a stand-in that takes the programs' fields."""
    import torch.utils._pytree as pytree

    out = {}
    for name in _STAND_IN_OUTPUTS:
        serialized = f"transformers.modeling_outputs.{name}"
        cls = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.get(serialized)
        if cls is not None and "cache" not in getattr(cls, "__dataclass_fields__", {"cache": None}):
            out[serialized] = _registered_stand_in_output(name, f"hfexport.{name}")
    return out


def output_leaves(outputs) -> list:
    """A program's outputs as the flat tensors of its pytree (the manifest's output order)."""
    import torch

    return torch.utils._pytree.tree_leaves(outputs)


def callable_of(manifest_dir: Path, entry: dict, program):
    """What runs a component: its AOTInductor package when the export has one (--aot), else
    the program as torch.export.load gives it (`module()`); both take the program's pytree."""
    if entry.get("aoti"):
        import torch

        return torch._inductor.aoti_load_package(str(Path(manifest_dir) / entry["aoti"]))
    return program.module()


class TorchProgramGraph:
    """One component's program for ExportedModel(**inputs): numpy in, numpy out, by name."""

    def __init__(self, path: Path, manifest_data: dict, program: str = "model", **options):
        check_runtime_versions(manifest_data, ["torch"])
        register_cache_pytrees()
        self.program = load_programs(path)[program]
        component = next(c for c in manifest_data["components"].values() if c.get("program", "model") == program)
        self.module = callable_of(Path(path).parent, component, self.program)
        self.input_names = [i["name"] for i in component["inputs"]]
        self.output_names = [o["name"] for o in component["outputs"]]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        with torch.no_grad():
            outputs = self.module(**{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()})
        return {name: value.float().numpy() if value.is_floating_point() else value.numpy()
                for name, value in zip(self.output_names, output_leaves(outputs))}


class TorchSession(Session):
    """The step component's program (and prefill's, where there is one), loaded once from the
    archive; a call takes the feeds and states as tensors, without copying the arrays."""

    def __init__(self, manifest: ExportManifest, step: str, threads: int | None = None, **options):
        super().__init__()
        import torch

        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        check_runtime_versions(manifest.data, ["torch"])
        register_cache_pytrees()
        self.step = step
        self.programs = load_programs(manifest.file_of(step))
        names = [c for c in (PREFILL, step) if manifest.has_component(c)]
        self.modules = {c: callable_of(manifest.directory, manifest.component(c), program_of(manifest, c, self.programs))
                        for c in names}
        self.outputs = {c: [o["name"] for o in manifest.component(c)["outputs"]] for c in names}
        self.inputs = {c: [i["name"] for i in manifest.component(c)["inputs"]] for c in names}
        self.pairs = [(p["input"], p["output"]) for p in manifest.generation["cache_pairs"]]
        specs = {i["name"]: i for i in manifest.component(step)["inputs"]}
        self.cache_specs = {name: specs[name] for name, _ in self.pairs}
        # The program copies a replaced state's new value into the caller's tensor (no output for it).
        self.replaced = manifest.replaced_states(step)
        # A static decode program written for transformers' StaticCache (the Python API's Dynamo
        # export) is called with one built over the runner's buffers: its spec holds max_cache_len.
        self.interface = manifest.data.get("pt2_interface")
        self.full_length_buffers = bool(self.interface)
        self.in_spec = program_of(manifest, step, self.programs).call_spec.in_spec if self.interface else None

    def open_encoder(self, manifest: ExportManifest) -> None:
        from .seq2seq import cross_state_names

        self.encoder = callable_of(manifest.directory, manifest.component(ENCODER),
                                   program_of(manifest, ENCODER, self.programs))
        self.encoder_outputs = [o["name"] for o in manifest.component(ENCODER)["outputs"]]
        self.cross = cross_state_names(manifest)

    def _tensor(self, value):
        """A tensor of an array; bfloat16 (ml_dtypes') keeps its bits."""
        a = np.ascontiguousarray(value)
        if a.dtype.name == "bfloat16":
            return self.torch.from_numpy(a.view(np.int16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(a)

    def encode(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The encoder's state outputs stay tensors every decoder call takes."""
        from .seq2seq import decoder_feeds, encoder_results

        given = {k: self._tensor(v) for k, v in inputs.items()}
        with self.torch.no_grad():
            outputs = dict(zip(self.encoder_outputs, output_leaves(self.encoder(**given))))
        self.fixed = decoder_feeds(self.cross, outputs, given, set(self.inputs[self.step]))
        return {k: v.float().numpy() for k, v in encoder_results(self.cross, outputs).items()}

    def has(self, component: str) -> bool:
        return component in self.modules

    def input_names(self, component: str) -> set[str]:
        return set(self.inputs[component])

    def cache_tensor(self, name: str, batch: int, length: int):
        spec = self.cache_specs[name]
        shape = state_buffer_shape(spec["shape"], batch, length, name in self.replaced)
        return self.torch.zeros(shape, dtype=getattr(self.torch, _DTYPES[spec["dtype"]]))

    def empty_states(self, batch: int) -> dict:
        return {name: self.cache_tensor(name, batch, 0) for name, _ in self.pairs}

    def static_buffers(self, batch: int, length: int) -> dict:
        buffers = {name: self.cache_tensor(name, batch, length) for name, _ in self.pairs}
        for name in self.inputs[self.step]:  # transformers' StaticLayer.cumulative_length
            if name.startswith("cumulative_length_"):
                buffers[name] = self.torch.zeros((), dtype=self.torch.int64)
        return buffers

    def call(self, component: str, feeds: dict) -> dict:
        """The component's outputs by name (tensors) for feeds of arrays or tensors."""
        torch = self.torch
        with torch.no_grad():
            values = self.modules[component](**{k: torch.from_numpy(np.ascontiguousarray(v))
                                                if isinstance(v, np.ndarray) else v for k, v in feeds.items()})
        return dict(zip(self.outputs[component], output_leaves(values)))

    def run(self, component: str, feeds: dict, states: dict) -> tuple[np.ndarray, dict]:
        feeds = {**feeds, **states, **(self.fixed if component == self.step else {})}
        if self.interface and component == self.step:  # the program's own pytree over the same tensors
            return self._call_interface(feeds), states
        out = self.call(component, feeds)
        # a state the program updated in place is the tensor passed in
        states = {name: out[present] if present in out else states[name] for name, present in self.pairs}
        return out["logits"][:, -1].float().numpy(), states

    def _call_interface(self, feeds: dict) -> np.ndarray:
        torch = self.torch
        leaves = [torch.from_numpy(np.ascontiguousarray(feeds[name])) if isinstance(feeds[name], np.ndarray)
                  else feeds[name] for name in self.inputs[self.step]]
        args, kwargs = torch.utils._pytree.tree_unflatten(leaves, self.in_spec)
        with torch.no_grad():
            return output_leaves(self.modules[self.step](*args, **kwargs))[0][:, -1].float().numpy()


class TorchDynamicRunner(DynamicCache):
    """A dynamic cache: each call returns its present tensors, passed back as the next call's past."""

    SESSION = TorchSession


class TorchStaticRunner(StaticCache):
    """A static cache: the program writes each step's rows into the caller's cache tensors in place."""

    SESSION = TorchSession

    @property
    def decode(self):
        """What runs the step program (its AOTInductor package with --aot)."""
        return self.session.modules[self.STEP]


def runner_class(manifest: ExportManifest) -> type[DecodeRunner]:
    """The runner class of a .pt2 generation export: its cache static (written in place) or dynamic."""
    return TorchStaticRunner if manifest.cache == CACHE_STATIC else TorchDynamicRunner
