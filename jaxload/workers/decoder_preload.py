"""Imported by the workers' fork server, never by the trainer: torchcodec, through jaxload's
import that skips `torch._dynamo` (`jaxload.decode.torchcodec_import`).

The fork server imports its preload list by module name (`multiprocessing.forkserver`), so
naming "torchcodec" there imports it plainly, dynamo included: about 1.3 s of the server's
CPU here, which every forked worker's first batch waits for (benchmarks/RESULTS.md, "How
workers start"). Importing this module instead runs the workaround in the server.
"""

from jaxload.decode.torchcodec_import import video_decoder_class

video_decoder_class()
