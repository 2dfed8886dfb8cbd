#!/usr/bin/env bash
# Rebuilds ffmpeg-5.1.9-nvdec-minimal.tgz (FFmpeg 5.1 shared libraries, prefix /opt/jlff, libc only,
# ~7 MB unpacked): the decoders/demuxers/filters torchcodec uses, plus NVDEC (nvdec hwaccels and
# cuvid decoders through the ffnvcodec headers, loaded at run time: no CUDA toolkit needed to build).
# Debian 12, as root, with network (Debian's source package): about 4 CPU-minutes.
# Usage: bash scripts/build_ffmpeg_nvdec.sh [OUT.tgz]; benchmarks/gpu_carry.py --ffmpeg OUT.tgz
set -euo pipefail
OUT=$(realpath "${1:-ffmpeg-5.1.9-nvdec-minimal.tgz}")
W=$(mktemp -d); cd "$W"
grep -q deb-src /etc/apt/sources.list.d/*.sources 2>/dev/null || \
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/src.sources
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libffmpeg-nvenc-dev nasm pkg-config >/dev/null
apt-get source --download-only ffmpeg >/dev/null 2>&1 && tar xf ffmpeg_5.1*.orig.tar.xz && cd ffmpeg-5.1*/
./configure --prefix=/opt/jlff --enable-shared --disable-static --disable-programs --disable-doc --disable-autodetect \
  --disable-everything --enable-pic --enable-ffnvcodec --enable-nvdec --enable-cuvid --enable-cuda \
  --enable-decoder=h264,hevc,av1,h264_cuvid,hevc_cuvid,av1_cuvid,mjpeg --enable-parser=h264,hevc,av1 \
  --enable-demuxer=mov,matroska,h264,hevc,obu --enable-muxer=mp4,mov,null --enable-protocol=file,pipe \
  --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb,av1_frame_split,av1_frame_merge,extract_extradata,null \
  --enable-hwaccel=h264_nvdec,hevc_nvdec,av1_nvdec \
  --enable-filter=buffer,buffersink,format,scale,crop,null,copy,hwdownload,hwupload,hwupload_cuda,aformat,abuffer,abuffersink,anull \
  --enable-swscale --enable-swresample --enable-avfilter --enable-avdevice --enable-indev=lavfi >/dev/null
make -j"$(nproc)" >/dev/null && make install >/dev/null
tar czf "$OUT" -C /opt jlff && echo "$OUT"
