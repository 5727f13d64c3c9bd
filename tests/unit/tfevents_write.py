"""tfevents_write.py DIR - event files from the real writers, for
test_tfevents_real: torch.utils.tensorboard.SummaryWriter's scalars (old
style: simple_value; new_style: a float tensor; double_precision: a double
tensor) and tensorboard's own EventFileWriter with a TF2-style scalar (a
DT_FLOAT tensor in tensor_content, plugin "scalars"). Tag "loss" values, in
step order: 0.5 @1, 0.25 @2, 0.125 @3, 0.0625 @4, 0.75 @5, 0.375 @6; a text
summary also tagged "loss" (a string tensor) is not one of them."""
import struct
import sys

from torch.utils.tensorboard import SummaryWriter
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.compat.proto import tensor_shape_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

d = sys.argv[1]
w = SummaryWriter(log_dir=d + "/torch")
w.add_scalar("loss", 0.5, 1)
w.add_scalar("accuracy", 0.9, 1)
w.add_text("loss", "not a number", 1)  # same tag, a string tensor
w.add_scalar("loss", 0.25, 2)
w.add_scalar("loss", 0.125, 3, new_style=True)
w.add_scalar("loss", 0.0625, 4, new_style=True, double_precision=True)
w.close()

e = EventFileWriter(d + "/tf2/train")
meta = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
for step, v, dt, fmt in ((5, 0.75, types_pb2.DT_FLOAT, "<f"), (6, 0.375, types_pb2.DT_DOUBLE, "<d")):
    t = tensor_pb2.TensorProto(dtype=dt, tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                               tensor_content=struct.pack(fmt, v))
    s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", tensor=t, metadata=meta)])
    e.add_event(event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=s))
e.close()
