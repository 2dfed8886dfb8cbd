"""Where video is decoded and where image transforms run, decided once per loader
(`decide`): the devices and the rules (`device`), this machine's GPUs and cores
(`machine`), `decode_device="auto"` by measurement (`choice`), the image transforms' place
(`transforms`)."""
