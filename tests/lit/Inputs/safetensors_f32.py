# Reads an fp32 safetensors file (what tlc train --save-weights and --save-gradients
# write) without numpy: {key: (shape, values)}. Exits naming a tensor of another dtype.
import json
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    tensors = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {key} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        tensors[key] = (info["shape"], struct.unpack(f"<{(end - begin) // 4}f", data[begin:end]))
    return tensors
