"""Video decode: compressed frames of a batch (`frames`), the backend every decode goes
through (`backend`: torchcodec on CPU or CUDA), and decoding onto the devices that hold
each row of a global batch (`on_device`)."""
