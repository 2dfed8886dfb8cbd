"""`resolve()`: make_loader's arguments resolved once, in phases, into one `LoaderSpec`.

    read = resolve_read(request)                             # 1. what is read
    options = resolve_options(read, options, datasets)       # 2. how (autotune, counts)
    placement, specs = decide_placement(read, options, ...)  # 3. where video is decoded
    spec = build_spec(read, placement, options, specs, request)  # 4. one LoaderSpec

`request` is make_loader's arguments as one `LoaderRequest` (jaxload.resolution.request).

1. what is read (`jaxload.sources.read.ReadSpec`): sources, the datasets opened with their
   windows in frames at each dataset's fps, the sample stream, each dataset's batch names,
   this host's rows;
2. the pipeline options: autotune's recommendation for the knobs left unset, then every
   count set from this machine's cores (`PipelineOptions.resolve`);
3. where video is decoded and image transforms run (`jaxload.placement.decide`: a fixed
   device, or "auto" measured on the read spec);
4. the batch schema, the keys a batch holds, and the spec.

Each phase takes what the ones before resolved; nothing is built twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from jaxload.batch.hosts import this_host_rows
from jaxload.batch.keys import key_selection
from jaxload.batch.schema import BatchSchema
from jaxload.episode_dataset import EpisodeDataset, OpenedDatasets, dataset_view
from jaxload.format.open_shards import check_open_files_limit
from jaxload.options import PipelineOptions
from jaxload.placement.decide import Placement, decide_placement
from jaxload.resolution.arguments import (
    check_fits_in_memory,
    check_shares,
    check_yields_a_batch,
    dataset_sizes,
    intended_weights,
    rule_weights,
    source_weights,
)
from jaxload.resolution.request import LoaderRequest
from jaxload.resolution.spec import LoaderSpec
from jaxload.sampling.mixture import StarvedDatasets
from jaxload.sampling.stream import SampleStream
from jaxload.sampling.weights import as_weight_rule
from jaxload.sources.read import ReadSpec
from jaxload.sources.source import as_sources, open_sources, source_key_map
from jaxload.sources.windows import warn_mostly_padded
from jaxload.state import stream_fingerprint


def resolve(request: LoaderRequest, options: PipelineOptions) -> tuple[LoaderSpec, OpenedDatasets]:
    """(the `LoaderSpec`, the opened datasets) of make_loader's arguments (`request`,
    checked already; `options` with `decode_device` and the deprecated shorthands folded
    in). The caller owns the datasets (the `Loader` closes them)."""
    read = resolve_read(request)
    datasets = OpenedDatasets(read.datasets)
    options = resolve_options(read, options, datasets)
    placement, specs = decide_placement(
        read, options, request.image_transforms, request.image_transforms_on
    )
    spec = build_spec(read, placement, options, specs, request)
    check_fits_in_memory(spec)
    return spec, datasets


def resolve_read(request: LoaderRequest) -> ReadSpec:
    """Phase 1, what is read: the sources, their datasets opened (windows in frames at each
    dataset's fps), the sample stream, each dataset's batch names and this host's rows.

    Example:
        read = resolve_read(
            LoaderRequest("out/demo", global_batch_size=8, delta_frames={"action": range(4)})
        )
    """
    r = request
    rule = as_weight_rule(r.weights)
    sources = as_sources(
        r.paths_or_datasets,
        episodes=r.episodes,
        delta_timestamps=r.delta_timestamps,
        delta_frames=r.delta_frames,
        snap_windows=r.snap_windows,
        weights=None if rule is not None else r.weights,
        key_maps=r.key_maps,
        storage_options=r.storage_options,
    )
    datasets = open_sources(sources, remote=r.remote)
    for source, dataset in zip(sources, datasets, strict=True):
        if len(dataset.episode_lengths) == 0:
            raise ValueError(f"{source.name}: no episodes to read (an empty episode selection)")
    names = tuple(s.name for s in sources)
    warn_mostly_padded(names, datasets, r.drop_n_first_frames, r.drop_n_last_frames)
    sizes = dataset_sizes(datasets, r.drop_n_first_frames, r.drop_n_last_frames)
    mixture_weights = (
        source_weights(sources)
        if rule is None or len(sources) == 1
        else rule_weights(rule, sources, sizes)
    )
    intended = intended_weights(rule, sources, sizes)
    try:
        stream = SampleStream(
            [d.episode_lengths for d in datasets],
            weights=mixture_weights,
            seed=r.seed,
            shuffle=r.shuffle,
            drop_n_first_frames=r.drop_n_first_frames,
            drop_n_last_frames=r.drop_n_last_frames,
            mixture_block_size=r.mixture_block_size,
        )
    except StarvedDatasets as e:  # name them: a weight too small for any block
        check_shares(
            names,
            intended,
            mixture_weights,
            [int(d not in e.datasets) for d in range(len(names))],
            rule,
        )
        raise
    check_shares(names, intended, mixture_weights, stream.mixture and stream.mixture.quota, rule)
    check_yields_a_batch(stream.epoch_size, r.num_epochs, r.global_batch_size)
    rows, host_count = this_host_rows(r.global_batch_size, r.sharding, r.host_index, r.host_count)
    return ReadSpec(
        sources=tuple(sources),
        datasets=tuple(datasets),
        names=names,
        stream=stream,
        key_maps=tuple(source_key_map(s, d) for s, d in zip(sources, datasets, strict=True)),
        global_batch_size=int(r.global_batch_size),
        rows=rows,
        host_count=host_count,
        sharding=r.sharding,
        num_epochs=r.num_epochs,
    )


def resolve_options(
    read: ReadSpec, options: PipelineOptions, datasets: OpenedDatasets
) -> PipelineOptions:
    """Phase 2, how the pipeline runs: autotune's recommendation for the knobs left unset
    (first: it may leave the decode device to "auto"'s measurement), then every count set
    from this machine's cores (one read thread more where a remote cache is in memory)."""
    if options.autotune:
        options = _autotuned(options, read)
    in_memory = any(s.options.cache_dir is None for s in datasets.stores.values())
    options = options.resolve(remote=in_memory)
    check_open_files_limit(options.read_threads, options.num_workers)  # workers inherit it
    return options


def build_spec(
    read: ReadSpec,
    placement: Placement,
    options: PipelineOptions,
    specs: Sequence[Mapping[str, Any]],
    request: LoaderRequest,
) -> LoaderSpec:
    """Phase 4: the batch schema (each dataset's cameras as the readers deliver them, from
    the placement), the keys a batch holds, and the one `LoaderSpec`."""
    datasets: Sequence[EpisodeDataset] = read.datasets
    schema = BatchSchema(specs, read.key_maps)
    batch_transform = request.batch_transform
    selection = key_selection(
        request.keys,
        [*schema.fields, *schema.strings],
        mixture=len(datasets) > 1,
        transform=batch_transform,
    )
    fingerprints = tuple(str(d.fingerprint) for d in datasets)
    return LoaderSpec(
        names=read.names,
        fingerprint=stream_fingerprint(
            fingerprints,
            [d.episode_index for d in datasets],
            [d.episode_lengths for d in datasets],
        ),
        dataset_fingerprints=fingerprints,
        views=tuple(dataset_view(d) for d in datasets),
        episode_index=tuple(d.episode_index for d in datasets),
        episode_lengths=tuple(d.episode_lengths for d in datasets),
        stream=read.stream,
        schema=schema,
        keys=selection,
        global_batch_size=read.global_batch_size,
        seed=int(request.seed),
        shuffle=bool(request.shuffle),
        drop_n_first_frames=int(request.drop_n_first_frames),
        drop_n_last_frames=int(request.drop_n_last_frames),
        num_epochs=read.num_epochs,
        rows=read.rows,
        host_count=read.host_count,
        sharding=read.sharding,
        placement=placement,
        batch_transforms=(batch_transform,) if batch_transform is not None else (),
        options=options,
    )


def _autotuned(options: PipelineOptions, read: ReadSpec) -> PipelineOptions:
    """Apply jaxload.autotune's recommendation to the knobs the caller left unset."""
    from jaxload.autotune import tuned_loader_kwargs

    explicit = {k: getattr(options, k) for k in options.explicit}
    windows = read.sources[0].delta_timestamps if len(read.sources) == 1 else None
    tuned = tuned_loader_kwargs(
        list(read.datasets), delta_timestamps=windows, host_count=read.host_count,
        overrides=explicit,
    )  # fmt: skip
    if tuned.get("decode_device", "cpu") != "cpu" and read.sharding is None:
        tuned["decode_device"] = "cpu"  # decoding onto devices needs to know which: `sharding`
    fields = {f.name for f in dataclasses.fields(PipelineOptions)} - {"autotune"}
    return dataclasses.replace(options, **{k: v for k, v in tuned.items() if k in fields})
