from os import PathLike
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import numpy.typing as npt

SINGLE_DTYPE: np.dtype
COINCIDENCE_DTYPE: np.dtype
FRAME_DTYPE: np.dtype
POLICIES: Tuple[str, ...]

_T = TypeVar("_T")
_R = TypeVar("_R")

class InvalidInputError(ValueError): ...
class CapacityError(ValueError): ...
class CudaError(RuntimeError): ...

class Backend:
    def __init__(
        self,
        kind: str = "auto",
        device: int = 0,
        devices: Union[None, str, int, Sequence[int]] = None,
    ) -> None: ...
    @property
    def devices(self) -> int: ...
    def map(self, fn: Callable[["Backend", _T], _R], items: Iterable[_T]) -> List[_R]: ...
    @property
    def kind(self) -> str: ...
    @property
    def description(self) -> str: ...
    def scan(self, values: npt.ArrayLike, inclusive: bool = False) -> npt.NDArray[np.unsignedinteger]: ...
    def select(self, values: npt.ArrayLike, lo: int, hi: int) -> npt.NDArray[np.uint32]: ...
    def radix_sort(
        self,
        keys: npt.ArrayLike,
        values: Optional[npt.ArrayLike] = None,
        begin_bit: int = 0,
        end_bit: Optional[int] = None,
        descending: bool = False,
    ) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]: ...
    def argsort(
        self,
        keys: npt.ArrayLike,
        begin_bit: int = 0,
        end_bit: Optional[int] = None,
        descending: bool = False,
    ) -> npt.NDArray[np.uint32]: ...
    def histogram(self, keys: npt.ArrayLike, nbins: int) -> Tuple[npt.NDArray[np.uint32], int, Optional[int]]: ...
    def cluster(
        self,
        module: npt.ArrayLike,
        x: npt.ArrayLike,
        y: npt.ArrayLike,
        adc: npt.ArrayLike,
        geometry: str = "phase1",
        charge_cut: Union[None, bool, int] = None,
        event_offsets: Optional[npt.ArrayLike] = None,
    ) -> Tuple[npt.NDArray[np.int32], npt.NDArray[np.uint32]]: ...
    def convert(self, frames: Union[bytes, npt.ArrayLike], scanner: Union[str, PathLike]) -> Tuple[np.ndarray, dict]: ...
    def sort(self, singles: np.ndarray) -> np.ndarray: ...
    def coincide(self, singles: np.ndarray, window: float, delay: Optional[float] = None, policy: str = "killAll") -> np.ndarray: ...
    def seed(
        self,
        x: npt.ArrayLike,
        y: npt.ArrayLike,
        z: npt.ArrayLike,
        var_r: Optional[npt.ArrayLike] = None,
        var_z: Optional[npt.ArrayLike] = None,
        **settings: float,
    ) -> Tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
    def seed_events(
        self,
        events: Sequence[Tuple[npt.ArrayLike, ...]],
        **settings: float,
    ) -> List[Tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]]: ...

class generate:
    @staticmethod
    def cluster_event(seed: int = 1, dense: bool = False) -> Tuple[npt.NDArray[np.uint16], ...]: ...
    @staticmethod
    def seeding_event(seed: int = 1, mu: float = 200.0) -> Tuple[np.ndarray, ...]: ...
    @staticmethod
    def pet_acquisition(directory: Union[str, PathLike], singles: int = 100_000, seed: int = 1) -> int: ...

def read_singles(path: Union[str, PathLike]) -> np.ndarray: ...
def read_pairs(path: Union[str, PathLike]) -> np.ndarray: ...
def write_singles(path: Union[str, PathLike], singles: np.ndarray) -> None: ...
def write_pairs(path: Union[str, PathLike], pairs: np.ndarray) -> None: ...
