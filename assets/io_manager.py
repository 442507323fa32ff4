"""The IO manager every asset's value goes through: typed values in, the same types out.

An asset returns a pydantic model (``NoiseFloor``, ``ProposalBatch``, ``list[SweepResult]``), a plain
JSON value (dict, list, str) or a polars frame; the manager stores it under
``$AUTORESEARCH_HOME/assets/<endpoint>/<asset>[/<partition>]`` (JSON, or Parquet for a frame) and a
downstream asset gets it back validated against its input's annotation. An unpartitioned asset that
reads a partitioned one (``confirmed_baseline`` reads every candidate's ``verdicts``) gets
``{partition: value}`` for the partitions materialized so far. Assets exchange nothing else: no
files on the side.
"""

from __future__ import annotations

import typing
from pathlib import Path

import dagster as dg
import polars as pl
import pydantic_core
from pydantic import TypeAdapter


class TypedIOManager(dg.ConfigurableIOManager):
    """JSON (pydantic models and plain values) or Parquet (polars frames) per asset and partition."""

    base_dir: str

    def _file(self, key: dg.AssetKey, partition: str | None, frame: bool) -> Path:
        folder = Path(self.base_dir, *key.path)
        return (folder / partition if partition is not None else folder / "value").with_suffix(
            ".parquet" if frame else ".json"
        )

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        if obj is None:  # an asset that only reports metadata
            return
        file = self.store(context.asset_key, context.partition_key if context.has_partition_key else None, obj)
        context.add_output_metadata({"stored_at": dg.MetadataValue.path(str(file))})

    def store(self, key: dg.AssetKey, partition: str | None, obj) -> Path:
        """Write ``obj`` as the value of ``key`` (also how a campaign records a value it measured)."""
        frame = isinstance(obj, pl.DataFrame)
        file = self._file(key, partition, frame)
        file.parent.mkdir(parents=True, exist_ok=True)
        other = self._file(key, partition, not frame)
        if frame:
            obj.write_parquet(file)
        else:
            # values are model dumps and plain data; anything else (a Path in a record) is kept as its text
            file.write_bytes(pydantic_core.to_json(obj, indent=1, fallback=str))
        other.unlink(missing_ok=True)  # a value is one file: a reader prefers the frame
        return file

    def load_input(self, context: dg.InputContext):
        annotation = context.dagster_type.typing_type
        key = context.asset_key
        if context.has_asset_partitions and not context.has_partition_key:
            # every partition of a partitioned upstream into one unpartitioned asset: {partition: value}
            inner = typing.get_args(annotation)[1] if typing.get_origin(annotation) is dict else typing.Any
            return {
                partition: self._read(key, partition, inner)
                for partition in context.asset_partition_keys
                if self._exists(key, partition)
            }
        partition = context.asset_partition_key if context.has_asset_partitions else None
        if not self._exists(key, partition):
            raise dg.Failure(
                f"{key.to_user_string()}{f' [{partition}]' if partition else ''} has no stored value: "
                "materialize it first"
            )
        return self._read(key, partition, annotation)

    def _exists(self, key: dg.AssetKey, partition: str | None) -> bool:
        return self._file(key, partition, False).exists() or self._file(key, partition, True).exists()

    def _read(self, key: dg.AssetKey, partition: str | None, annotation):
        frame = self._file(key, partition, True)
        if frame.exists():
            return pl.read_parquet(frame)
        text = self._file(key, partition, False).read_bytes()
        return TypeAdapter(annotation if annotation not in (None, typing.Any) else typing.Any).validate_json(text)
