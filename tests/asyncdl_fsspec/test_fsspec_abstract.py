"""fsspec's own abstract tests (``fsspec.tests.abstract``) on asyncdl's file system:
the get tests, the ones that apply to a read-only file system (copy, put, pipe and
open write to the file system under test). Their scenarios are seeded into moto
with boto3, since the file system under test cannot write them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fsspec.tests.abstract import AbstractFixtures, AbstractGetTests

from asyncdl.fsspec import AsyncdlFileSystem


class _Seeder:
    """What the scenarios call to make their files (``makedirs``, ``touch``,
    ``pipe``), done with boto3: S3 has no directories, so ``makedirs`` makes none."""

    def __init__(self, s3: Any) -> None:
        self._s3 = s3

    def _put(self, path: str, body: bytes) -> None:
        bucket, _, key = path.partition("/")
        self._s3.put_object(Bucket=bucket, Key=key, Body=body)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        pass

    def touch(self, path: str) -> None:
        self._put(path, b"")

    def pipe(self, path: str, value: bytes) -> None:
        self._put(path, value)


class AsyncdlFixtures(AbstractFixtures):  # type: ignore[misc]  # fsspec is untyped
    @pytest.fixture
    def fs(self, s3_endpoint: str) -> Iterator[AsyncdlFileSystem]:
        made = AsyncdlFileSystem(endpoint_url=s3_endpoint, skip_instance_cache=True)
        yield made
        made.close()

    @pytest.fixture
    def fs_path(self, bucket: str) -> str:
        return bucket

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False

    @pytest.fixture
    def seeder(self, s3: Any) -> _Seeder:
        return _Seeder(s3)

    @pytest.fixture
    def fs_bulk_operations_scenario_0(
        self, fs: AsyncdlFileSystem, fs_join: Any, fs_path: str, seeder: _Seeder
    ) -> str:
        source: str = self._bulk_operations_scenario_0(seeder, fs_join, fs_path)
        return source

    @pytest.fixture
    def fs_glob_edge_cases_files(
        self, fs: AsyncdlFileSystem, fs_join: Any, fs_path: str, seeder: _Seeder
    ) -> str:
        source: str = self._glob_edge_cases_files(seeder, fs_join, fs_path)
        return source

    @pytest.fixture
    def fs_dir_and_file_with_same_name_prefix(
        self, fs: AsyncdlFileSystem, fs_join: Any, fs_path: str, seeder: _Seeder
    ) -> str:
        source: str = self._dir_and_file_with_same_name_prefix(seeder, fs_join, fs_path)
        return source

    @pytest.fixture
    def fs_10_files_with_hashed_names(
        self, fs: AsyncdlFileSystem, fs_join: Any, fs_path: str, seeder: _Seeder
    ) -> str:
        source: str = self._10_files_with_hashed_names(seeder, fs_join, fs_path)
        return source


class _SeededWrites:
    """The file system under test, whose writes (``mkdir``, ``touch``) a test makes
    for its own set-up go to the seeder instead; everything else is the file system's."""

    def __init__(self, fs: AsyncdlFileSystem, seeder: _Seeder) -> None:
        self._fs, self._seeder = fs, seeder

    def mkdir(self, path: str) -> None:
        self._seeder.makedirs(path)

    def touch(self, path: str) -> None:
        self._seeder.touch(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


class TestAsyncdlGet(AbstractGetTests, AsyncdlFixtures):  # type: ignore[misc]
    def test_get_directory_recursive(
        self,
        fs: AsyncdlFileSystem,
        fs_join: Any,
        fs_path: str,
        local_fs: Any,
        local_join: Any,
        local_target: str,
        seeder: _Seeder,
    ) -> None:
        """fsspec's test as it is, its set-up's two writes seeded through boto3."""
        super().test_get_directory_recursive(
            _SeededWrites(fs, seeder), fs_join, fs_path, local_fs, local_join, local_target
        )
