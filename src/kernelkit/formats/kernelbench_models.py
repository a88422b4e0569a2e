"""KernelBench's models, built and run the way its evaluator builds and runs them (see kernelbench.py).

``Models`` builds each (role, device, dtype) lazily from KernelBench's seed, holds one problem's models at a time
(a level's problems go through one worker; each one's weights would stay otherwise), and runs a random model from
a fixed seed every call, so the reference and a solution making the same RNG calls draw the same numbers.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import torch

KERNELBENCH_SEED = 42  # eval_kernel_against_ref(seed_num=42)
STOCHASTIC_SEED = 1234  # the seed every call of a model with active dropout starts from
InputsOn = Literal["cpu", "device"]


@dataclass
class Problem:
    """A KernelBench problem file, imported under a module name of its own."""

    path: Path
    module: ModuleType
    model: type
    get_inputs: Callable[[], Sequence[Any]]
    get_init_inputs: Callable[[], Sequence[Any]]

    @property
    def name(self) -> str:
        return self.path.stem


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """KernelBench's set_seed(seed) for the block; the CPU generator's state is put back afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # also seeds the CUDA generators, as set_seed's torch.cuda.manual_seed does
        yield


def cuda_indices(device: torch.device) -> list[int]:
    """The CUDA generator indices ``fork_rng`` must save for ``device``: none for the CPU."""
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def move(value: Any, device: torch.device | str, dtype: torch.dtype | None) -> Any:
    """A tensor onto ``device``, floating ones cast to ``dtype``; anything else unchanged."""
    if not isinstance(value, torch.Tensor):
        return value
    if dtype is not None and value.is_floating_point():
        return value.to(device=device, dtype=dtype)
    return value.to(device=device)


_HELD: list[Models] = []  # the problem whose models are built now (at most one: the case a worker runs)


def _hold(models: Models) -> None:
    """``models`` becomes the one problem whose models are kept: another problem's are let go (a worker goes
    through a level's problems; each one's weights, 4 GiB for a 32768^2 Linear, would stay otherwise)."""
    for other in _HELD:
        if other is not models:
            other._made.clear()
    _HELD[:] = [models]


def held_bytes(device: str) -> int:
    """Bytes of ``device`` memory the kept models hold (the worker's own cache between the cases of a problem,
    not memory a case left behind)."""
    tensors = [t for models in _HELD for model in models._made.values() if isinstance(model, torch.nn.Module)
               for t in (*model.parameters(), *model.buffers()) if t.device.type == device]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


class Models:
    """The models of one problem, built lazily per (role, device, dtype) the way KernelBench builds them."""

    def __init__(self, problem: Problem, precision: torch.dtype, build_on: InputsOn = "cpu") -> None:
        self.problem = problem
        self.precision = precision
        self.build_on = build_on
        self._init: list[Any] | None = None
        self._made: dict[tuple[str, str, torch.dtype], torch.nn.Module] = {}
        self._stochastic: bool | None = None

    def init_inputs(self) -> list[Any]:
        if self._init is None:
            with seeded(KERNELBENCH_SEED):
                self._init = list(self.problem.get_init_inputs())
        return self._init

    def get(self, role: str, cls: type, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
        key = (role, str(device), dtype)
        if key not in self._made:
            if device.type != "meta":
                _hold(self)
            init = [move(x, device, dtype) for x in self.init_inputs()]
            model = self._build(cls, init, device)
            self._made[key] = model.to(device=device, dtype=dtype) if isinstance(model, torch.nn.Module) else model
        return self._made[key]

    def _build(self, cls: type, init: list[Any], device: torch.device) -> Any:
        """``cls(*init)`` from KernelBench's seed: on the meta device there (FLOPs counted from shapes, no weights);
        on the case's device with build_on="device" (a 32768x32768 Linear initialises in milliseconds there and in
        ~13 s on one CPU core), falling back to the CPU where the constructor cannot run on the device; else on the
        CPU, as KernelBench builds."""
        here = device.type == "meta" or (self.build_on == "device" and device.type != "cpu")
        if here:
            try:
                with torch.no_grad(), torch.random.fork_rng(devices=cuda_indices(device)), torch.device(device):
                    torch.manual_seed(KERNELBENCH_SEED)
                    return cls(*init)
            except Exception:  # noqa: BLE001 - a constructor that needs the CPU (numpy, .item()) is built there
                if device.type == "meta":
                    raise
        with torch.no_grad(), seeded(KERNELBENCH_SEED):
            return cls(*init)

    def stochastic(self, device: torch.device) -> bool:
        """Whether the reference's output depends on the RNG: an active Dropout, or a random draw in forward
        (some problems draw their initial hidden state there)."""
        if self._stochastic is None:
            model = self.get("reference", self.problem.model, device, self.precision)
            self._stochastic = draws_in_forward(self.problem.model) or (isinstance(model, torch.nn.Module) and any(
                isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 and m.training for m in model.modules()
            ))
        return self._stochastic

    def runner(self, role: str, cls: type | Callable[[], type]) -> Callable[..., Any]:
        """A function of the inputs that calls model ``cls`` (built for the inputs' device and dtype); ``cls`` may
        be a function that returns the class, called at the first call (a solution imported where it runs)."""

        def run(*inputs: Any) -> Any:
            model_cls = cls if isinstance(cls, type) else cls()
            device, dtype = _placement(inputs, self.precision)
            if not self.stochastic(device):
                with torch.no_grad():
                    return self.get(role, model_cls, device, dtype)(*inputs)
            # float64 masks differ from float32 ones: a random model's reference runs at the problem's precision
            low = dtype == torch.float64 and self.precision != torch.float64
            args = [move(x, device, self.precision) for x in inputs] if low else list(inputs)
            with torch.no_grad(), torch.random.fork_rng(devices=cuda_indices(device)):
                torch.manual_seed(STOCHASTIC_SEED)
                out = self.get(role, model_cls, device, self.precision if low else dtype)(*args)
            return _cast_outputs(out, torch.float64) if low else out

        run.__name__ = f"{self.problem.name}_{role}"
        return run


# Random draws in forward's text; a Dropout module is found on the model itself (only when p > 0).
_RANDOM_CALL = re.compile(r"\b(rand|randn|randint|randperm|rand_like|randn_like|randint_like|bernoulli|"
                          r"multinomial|normal_|uniform_|F\.dropout|functional\.dropout)\b")


def draws_in_forward(cls: type) -> bool:
    """Whether ``cls.forward``'s source calls a random function (read from the text; False when there is none)."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError, AttributeError):
        return False
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    return bool(_RANDOM_CALL.search(code))


def _placement(inputs: Sequence[Any], default: torch.dtype) -> tuple[torch.device, torch.dtype]:
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    floating = [x.dtype for x in tensors if x.is_floating_point()]
    return device, floating[0] if floating else default


def _cast_outputs(out: Any, dtype: torch.dtype) -> Any:
    if isinstance(out, (tuple, list)):
        return type(out)(_cast_outputs(o, dtype) for o in out)
    return out.to(dtype) if isinstance(out, torch.Tensor) and out.is_floating_point() else out
