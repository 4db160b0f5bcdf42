"""The registry the weighting functions (matching/model/aligners/weightings.py) are entered in: what each declares
(`Weighting`, its caption), the decorator that registers one, `find` by name or import path, and `Distribution`, the
module the design space (`aligner=attention`) applies one with. The functions themselves, and how to add one:
weightings.py."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from matching.errors import ConfigError
from matching.model.layers import pair_mask


class Caption(NamedTuple):
    """What a kind of matrix (its name without _a/_b) holds, for a panel's title: the weights' formula ('' where the
    name says it, or a function of the aligner's config node), what each row holds ({whose}: row or column), and the
    values its cells can take by the formula."""

    formula: str | Callable[[Mapping], str]
    each: str
    values: tuple[float, float]


#: Every kind of weights' caption, by the name its matrices carry: each weighting's, and those of aligners that are
#: not one weighting (differential, conflict), which declare theirs beside their code.
CAPTIONS: dict[str, Caption] = {}


class Learned(NamedTuple):
    """A learned scalar of a weighting: the option that gives its start, the default start, its name in a study's
    weights table, and whether it is stored as its log (a positive scalar, shown as itself)."""

    option: str
    start: float
    shown: str
    log: bool = False


@dataclass(frozen=True)
class Weighting:
    """A registered weighting function and what it declares (see the module docstring)."""

    name: str
    function: Callable[..., Tensor]
    normalised: bool  # whether each row's weights sum to 1
    options: dict[str, inspect.Parameter]  # its keyword-only arguments, learned scalars aside
    learned: dict[str, Learned] = field(default_factory=dict)
    check: Callable[..., str | None] | None = None  # an error message for bad options, or None
    cellwise: Callable[..., bool] | None = None  # given the options: the same weights whichever way (one call)

    def settle(self, given: Mapping[str, Any], defaults: Mapping[str, Any] = {}) -> dict[str, Any]:
        """The options of one use, from what a config gives (unknown keys refused) over `defaults` and its own."""
        known = {*self.options, *(learned.option for learned in self.learned.values())}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ConfigError(f"aligner.{unknown[0]}: the weighting {self.name!r} takes no option {unknown[0]!r}; "
                              f"its options: {sorted(known)}")  # fmt: skip
        options = {k: p.default for k, p in self.options.items()}
        options |= {learned.option: learned.start for learned in self.learned.values()}
        options |= {k: v for k, v in defaults.items() if k in known} | dict(given)
        problem = self.check(**options) if self.check else None
        if problem:
            raise ConfigError(problem)
        return options

    def parameters_for(self, options: Mapping[str, Any]) -> dict[str, nn.Parameter]:
        """Its learned scalars at their starts, to be registered on the module that uses it."""
        return {
            name: nn.Parameter(torch.tensor(math.log(options[s.option]) if s.log else float(options[s.option])))
            for name, s in self.learned.items()
        }

    def constants(self, holder: nn.Module) -> dict[str, float]:
        """Its learned scalars on `holder`, by their shown names (Aligner.learned_constants)."""
        return {
            s.shown: (getattr(holder, n).exp() if s.log else getattr(holder, n)).item() for n, s in self.learned.items()
        }

    def __call__(self, holder: nn.Module, scores: Tensor, mask: Tensor, dim: int, zero: Tensor | None,
                 options: Mapping[str, Any]) -> Tensor:  # fmt: skip
        fixed = {k: options[k] for k in self.options}
        return self.function(scores, mask, dim, zero, **fixed, **{n: getattr(holder, n) for n in self.learned})

    def both_ways(self, holder: nn.Module, e: Tensor, mask_a: Tensor, mask_b: Tensor, options: Mapping[str, Any]):
        """(weights_a, weights_b) of (B, La, Lb) scores: each a_i's row over b, each b_j's column over a, exactly 0
        on every padding row and column (the pair mask, converted to the scores' dtype once for both)."""
        valid = pair_mask(mask_a, mask_b, e.dtype)
        rows = self(holder, e, mask_b.unsqueeze(1), 2, valid, options)  # each a_i over b
        if self.cellwise and self.cellwise(**options):
            return rows, rows
        return rows, self(holder, e, mask_a.unsqueeze(2), 1, valid, options)  # each b_j over a


#: The weighting functions by config name.
WEIGHTINGS: dict[str, Weighting] = {}


def weighting(name: str, *, formula: str | Callable[[Mapping], str], each: str, values: tuple[float, float],
              normalised: bool = True, learned: dict[str, Learned] | None = None, check=None,
              cellwise=None):  # fmt: skip
    """Registers the decorated function as the weighting `name` (see the module docstring)."""

    def register(function):
        learned_ = learned or {}
        options = {k: p for k, p in inspect.signature(function).parameters.items()
                   if p.kind is inspect.Parameter.KEYWORD_ONLY and k not in learned_}  # fmt: skip
        WEIGHTINGS[name] = Weighting(name, function, normalised, options, learned_, check, cellwise)
        CAPTIONS[name] = Caption(formula, each, values)
        return function

    return register


def find(name: str) -> Weighting:
    """The weighting a config names: registered, or one of one's own by its import path (importing registers it)."""
    if name not in WEIGHTINGS and "." in name:
        from hydra.utils import get_object

        try:
            found = get_object(name)
        except Exception as error:
            raise ConfigError(f"the weighting {name!r} could not be imported: {error}") from error
        registered = next((w for w in WEIGHTINGS.values() if w.function is found), None)
        if registered is not None:
            return registered
    if name not in WEIGHTINGS:
        raise ConfigError(f"unknown weighting {name!r}; choose one of {sorted(WEIGHTINGS)} or a registered function's "
                          "import path")  # fmt: skip
    return WEIGHTINGS[name]


class Distribution(nn.Module):
    """A weighting as a module of its own, holding its options and learned scalars (the design space's `distribution`):
    `forward(scores, mask, dim)` -> weights along `dim`, 0 on the masked entries and in a slice with no valid one."""

    def __init__(self, name: str, **options):
        super().__init__()
        self.weighting = find(name)
        self.normalised = self.weighting.normalised
        self.options = self.weighting.settle(options)
        for key, parameter in self.weighting.parameters_for(self.options).items():
            self.register_parameter(key, parameter)

    def forward(self, scores: Tensor, mask: Tensor, dim: int) -> Tensor:
        return self.weighting(self, scores, mask, dim, None, self.options)
