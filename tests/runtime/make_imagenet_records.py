"""tests/runtime/make_imagenet_records.py DIR FILES PER_FILE CLASSES [MIN MAX]

Writes DIR/train-0000F-of-0000N: TFRecord files of tf.Example records as
TensorFlow's build_imagenet_data.py writes them (image/encoded: a JPEG,
image/class/label: int64, 1-based as ImageNet's, plus the script's other
features), with TensorFlow's own writer and JPEG encoder. Class c is a
picture of one colour (c's) with noise, in sizes and aspects that vary,
one in five of them greyscale (1 channel, as some of ImageNet's are).
MIN and MAX (default 40 and 120) bound each side; with MIN >= 200 the
pictures are smooth fields of colour with light noise, closer to photos'
JPEG sizes (bench/imagenet_input.sh: ImageNet's are ~500x375, ~110 KB)."""
import os
import sys

import numpy as np
import tensorflow as tf

out, nfiles, per, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lo, hi = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (40, 120)
photo = lo >= 200
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
colours = rng.integers(0, 256, size=(classes, 3))


def feature_bytes(v):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def feature_int(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))


n = 0
for f in range(nfiles):
    path = os.path.join(out, "train-%05d-of-%05d" % (f, nfiles))
    with tf.io.TFRecordWriter(path) as w:
        for i in range(per):
            c = int(rng.integers(0, classes))
            h, wd = int(rng.integers(lo, hi)), int(rng.integers(lo, hi))
            if photo:  # a smooth field around the class's colour: 6x6 blobs, upsampled
                field = rng.normal(0, 40, size=(6, 6, 3))
                ys, xs = np.linspace(0, 5, h), np.linspace(0, 5, wd)
                y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
                y1, x1 = np.minimum(y0 + 1, 5), np.minimum(x0 + 1, 5)
                fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
                smooth = ((1 - fy) * ((1 - fx) * field[y0][:, x0] + fx * field[y0][:, x1]) +
                          fy * ((1 - fx) * field[y1][:, x0] + fx * field[y1][:, x1]))
                pix = colours[c] + smooth + rng.normal(0, 12, size=(h, wd, 3))
            else:
                pix = colours[c] + rng.normal(0, 20, size=(h, wd, 3))
            img = np.clip(pix, 0, 255).astype(np.uint8)
            if n % 5 == 4:
                img = img.mean(axis=2, keepdims=True).astype(np.uint8)
            jpeg = tf.io.encode_jpeg(img, quality=90).numpy()
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image/height": feature_int(h), "image/width": feature_int(wd),
                "image/colorspace": feature_bytes(b"RGB"), "image/channels": feature_int(3),
                "image/class/label": feature_int(c + 1),
                "image/class/synset": feature_bytes(b"n%08d" % c),
                "image/format": feature_bytes(b"JPEG"),
                "image/filename": feature_bytes(b"img_%d.JPEG" % n),
                "image/encoded": feature_bytes(jpeg)}))
            w.write(ex.SerializeToString())
            n += 1
print("wrote %d records in %d files" % (n, nfiles))
