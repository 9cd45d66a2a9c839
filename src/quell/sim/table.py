"""``Table``: rows of named numpy columns, the simulator's per-resource and per-instance state.

A table's columns are the fields of a ``NamedTuple`` whose annotations give each column's
dtype (``NDArray[np.float64]``...), so a new column is one line there. Rows are appended one at a
time (an instance added while the run goes on), and the columns grow by doubling."""

from __future__ import annotations

from typing import Any, Generic, TypeVar, get_args, get_type_hints

import numpy as np

T = TypeVar("T", bound=tuple[Any, ...])


def column_dtypes(schema: type[Any]) -> dict[str, np.dtype[Any]]:
    """Each field of the NamedTuple ``schema`` and the dtype its ``NDArray[...]`` annotation
    names, in field order."""
    return {
        name: np.dtype(get_args(get_args(hint)[1])[0])
        for name, hint in get_type_hints(schema).items()
    }


class Table(Generic[T]):
    """Rows with the columns of ``schema``; ``cols`` holds each column's first ``len(self)``
    entries (views: writing into them writes the table)."""

    def __init__(self, schema: type[T]) -> None:
        self.schema = schema
        self._dtypes = column_dtypes(schema)
        self._n = 0
        self._arrays = {name: np.zeros(0, dtype=dt) for name, dt in self._dtypes.items()}
        self.cols = self._views()

    def __len__(self) -> int:
        return self._n

    def append(self, **values: Any) -> int:
        """Add a row, each column named in ``values`` set so, the others 0 (``None`` in an
        object column); returns the row's index."""
        unknown = set(values) - set(self._dtypes)
        if unknown:
            raise TypeError(f"{self.schema.__name__} has no column {', '.join(sorted(unknown))}")
        k = self._n
        if k == next(iter(self._arrays.values())).size:
            for name, a in self._arrays.items():
                grown = np.zeros(max(2 * a.size, 8), dtype=a.dtype)
                grown[:k] = a
                self._arrays[name] = grown
        for name, a in self._arrays.items():
            a[k] = values.get(name, None if a.dtype == object else 0)
        self._n = k + 1
        self.cols = self._views()
        return k

    def _views(self) -> T:
        return self.schema(*(a[: self._n] for a in self._arrays.values()))
