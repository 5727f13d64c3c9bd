"""bench/tf_imagenet_input.py DIR [BATCH=64] [SIZE=224] [THREADS=nproc] [BATCHES=20]

The peer of bench/imagenet_input.c: TensorFlow's tf.data input pipeline for
ImageNet training as its official ResNet and tf_cnn_benchmarks build it, on
the same TFRecord files: files interleaved (THREADS at once), tf.Example
parsed, Inception's crop with sample_distorted_bounding_box and the fused
decode_and_crop_jpeg (which decodes only the crop's blocks), bilinear
resize, random flip, normalisation, batched, prefetched; THREADS threads in
tf.data's private pool. Prints images/s after one batch of warm-up."""
import glob
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

d = sys.argv[1]
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
size = int(sys.argv[3]) if len(sys.argv) > 3 else 224
threads = int(sys.argv[4]) if len(sys.argv) > 4 and int(sys.argv[4]) > 0 else os.cpu_count()
batches = int(sys.argv[5]) if len(sys.argv) > 5 else 20
MEAN = tf.constant([123.675, 116.28, 103.53])
STD = tf.constant([58.395, 57.12, 57.375])


def parse(rec):
    f = tf.io.parse_single_example(rec, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
    shape = tf.io.extract_jpeg_shape(f["image/encoded"])
    begin, crop, _ = tf.image.sample_distorted_bounding_box(
        shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
        min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33], area_range=[0.08, 1.0],
        max_attempts=10, use_image_if_no_bounding_boxes=True)
    window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
    img = tf.io.decode_and_crop_jpeg(f["image/encoded"], window, channels=3)
    img = tf.image.resize(img, [size, size], method="bilinear")
    img = tf.image.random_flip_left_right(img)
    return (img - MEAN) / STD, tf.cast(f["image/class/label"], tf.int32)


files = sorted(glob.glob(os.path.join(d, "train-*")))
ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files)).repeat()
ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(threads, len(files)),
                   num_parallel_calls=threads)
ds = ds.map(parse, num_parallel_calls=threads).batch(batch).prefetch(2)
opt = tf.data.Options()
opt.threading.private_threadpool_size = threads
ds = ds.with_options(opt)
it = iter(ds)
next(it)  # warm-up
t0 = time.time()
for _ in range(batches):
    x, y = next(it)
_ = x.numpy()
secs = time.time() - t0
print("tf.data images/s: %.1f (%d threads, batch %d, %dx%d, %d batches)"
      % (batch * batches / secs, threads, batch, size, size, batches))
