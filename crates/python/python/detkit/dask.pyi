from os import PathLike
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import Backend, Scanner

_Path = Union[str, PathLike[str]]

class FileFailure:
    path: str
    error_type: str
    message: str
    worker: Optional[str]
    traceback: str
    def __init__(
        self,
        path: str,
        error_type: str,
        message: str,
        worker: Optional[str] = None,
        traceback: str = "",
    ) -> None: ...

class DaskFilesError(Exception):
    failures: List[FileFailure]
    results: List[Any]
    paths: List[str]
    def __init__(self, failures: List[FileFailure], results: List[Any], paths: List[str]) -> None: ...
    def succeeded(self) -> Dict[str, Any]: ...

def worker_backend(kind: str = "auto", device: int = 0) -> Backend: ...
def map_files(
    func: Callable[..., Any],
    paths: Iterable[_Path],
    *,
    client: Any = None,
    backend: str = "auto",
    device: int = 0,
    resources: Optional[Dict[str, float]] = None,
    errors: str = "raise",
    files_per_task: Optional[int] = None,
    direct: Optional[bool] = None,
    **kwargs: Any,
) -> List[Any]: ...
def read_digis(path: _Path) -> Tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint16], npt.NDArray[np.uint16], npt.NDArray[np.uint16]]: ...
def read_spacepoints(
    path: _Path,
) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
def worker_scanner(path: _Path) -> Scanner: ...
def cluster_file(
    backend: Backend,
    path: _Path,
    *,
    geometry: str = "phase1",
    charge_cut: Union[None, bool, int] = None,
) -> Tuple[npt.NDArray[np.int32], npt.NDArray[np.uint32]]: ...
def seed_file(
    backend: Backend, path: _Path, **settings: float
) -> Tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
def pet_file(
    backend: Backend,
    path: _Path,
    *,
    scanner: Optional[_Path] = None,
    window: Optional[float] = None,
    delay: Optional[float] = None,
    policy: str = "killAll",
) -> Tuple[np.ndarray, dict]: ...
