"""Multi-worker training with Keras and MultiWorkerMirroredStrategy.

Written the way TensorFlow's "Multi-worker training with Keras" tutorial does
it: the cluster comes from the TF_CONFIG environment variable, which
TensorFlow reads by itself; every worker runs the same code; only the chief
saves the model to the job dir, the other workers save to a temporary
directory that they then delete.

    python -m trainer.task --job-dir DIR [--epochs N] [--steps N]
"""
import argparse
import json
import os
import shutil

import numpy as np
import tensorflow as tf


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--job-dir", default=os.environ.get("AIP_MODEL_DIR", "/tmp/tf_mwms"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="steps per epoch")
    p.add_argument("--batch-size", type=int, default=16, help="per worker")
    return p.parse_args()


def mnist_like_dataset(global_batch_size, seed=0):
    # synthetic MNIST-shaped data: 28x28 images, 10 classes
    rng = np.random.default_rng(seed)
    x = rng.random((512, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=(512,)).astype(np.int64)
    return (tf.data.Dataset.from_tensor_slices((x, y))
            .shuffle(512).repeat().batch(global_batch_size))


def build_and_compile_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.01),
        metrics=["accuracy"])
    return model


# the tutorial's helpers: the chief writes to the real path, the others to a
# temporary one. The chief is the "chief" task where the cluster has one,
# else worker 0 (both TF_CONFIG shapes of the tutorial), or a lone process.
def _is_chief(task_type, task_id, cluster):
    if task_type is None or task_type == "chief":
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def _get_temp_dir(dirpath, task_id):
    return os.path.join(dirpath, "workertemp_" + str(task_id))


def write_filepath(filepath, task_type, task_id, cluster):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id, cluster):
        dirpath = _get_temp_dir(dirpath, task_id)
    tf.io.gfile.makedirs(dirpath)
    return os.path.join(dirpath, base)


def main():
    args = parse_args()
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    print("TF_CONFIG task:", tf_config.get("task"), flush=True)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print("num_replicas_in_sync:", strategy.num_replicas_in_sync, flush=True)

    global_batch_size = args.batch_size * strategy.num_replicas_in_sync
    dataset = mnist_like_dataset(global_batch_size)
    with strategy.scope():
        model = build_and_compile_model()

    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps, verbose=2)
    print("final loss: %.4f" % history.history["loss"][-1], flush=True)

    task_type = strategy.cluster_resolver.task_type
    task_id = strategy.cluster_resolver.task_id
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    model_path = write_filepath(os.path.join(args.job_dir, "model"), task_type, task_id, cluster)
    # every worker must take part in saving (the variables are read
    # collectively); only the chief's copy is kept
    model.save(model_path)
    if not _is_chief(task_type, task_id, cluster):
        shutil.rmtree(os.path.dirname(model_path), ignore_errors=True)
    else:
        print("saved model to", model_path, flush=True)


if __name__ == "__main__":
    main()
