# Generated from notebooks/06_scaling_out.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""06 · Scaling out: tf.distribute, the tf.data service and Apache Beam: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf
import keras


# ---------------- defined in notebooks/06_scaling_out.ipynb, section: 3. Several machines: `MultiWorkerMirroredStrategy`
def file_sharded_dataset(files, counts, parse, global_batch, workers, buffer=10_000):
    """One worker's training batches from TFRecord `files` (`counts[i]` records in `files[i]`),
    sharded by FILE, and the number of steps every worker can run per epoch. `parse` turns a
    batch of serialized records into `(images, labels)`."""
    if len(files) < workers:
        raise ValueError(f"{len(files)} shards cannot be shared by file among {workers} workers: "
                         f"write at least one shard per worker")
    # The smallest share: as many whole files as every worker gets, at the smallest file's size.
    steps = min(counts) * (len(files) // workers) // (global_batch // workers)
    dataset = (tf.data.Dataset.from_tensor_slices([str(f) for f in files])
               .shuffle(len(files), seed=0)                  # one seed on every worker: one order
               .interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=4,
                           deterministic=False)
               .shuffle(buffer).repeat()
               .batch(global_batch)                          # global: each worker receives its part
               .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
               .prefetch(tf.data.AUTOTUNE))
    options = tf.data.Options()   # worker i of N keeps files i, i + N, … of the list, reads those
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
    return dataset.with_options(options), steps


# ---------------- defined in notebooks/06_scaling_out.ipynb, section: 3. Several machines: `MultiWorkerMirroredStrategy`
def replicated_training(strategy, make_model, global_batch):
    """A model from `make_model()` with its variables mirrored by `strategy`, and a step that
    trains it on one global batch."""
    with strategy.scope():                 # variables created here are mirrored on every replica
        model = make_model()
        optimizer = keras.optimizers.RMSprop()
    loss_of = keras.losses.SparseCategoricalCrossentropy(reduction=None)   # one loss per sample

    def replica_step(images, labels):      # on each replica, with its part of the global batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(   # summed, ÷ the GLOBAL batch
                loss_of(labels, model(images, training=True)), global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))  # all-reduced, applied
        return loss

    @tf.function
    def train_step(batch):
        per_replica_losses = strategy.run(replica_step, args=batch)
        return strategy.reduce("SUM", per_replica_losses, axis=None)   # the global batch's mean
    return model, train_step


# ---------------- defined in notebooks/06_scaling_out.ipynb, section: 3. Several machines: `MultiWorkerMirroredStrategy`
def train_worker(files, counts, parse, make_model, epochs, global_batch):
    """What every worker of the cluster runs: join it (TF_CONFIG), train on its own files, return
    a report. Call it before TensorFlow runs any op: the strategy sets up collective ops first."""
    import hashlib

    strategy = tf.distribute.MultiWorkerMirroredStrategy()   # reads TF_CONFIG; waits for all
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    dataset, steps = file_sharded_dataset(files, counts, parse, global_batch, workers)
    batches = iter(strategy.experimental_distribute_dataset(dataset))   # applies the FILE policy
    model, train_step = replicated_training(strategy, make_model, global_batch)
    epoch_losses = []
    for _ in range(epochs):
        losses = [float(train_step(next(batches))) for _ in range(steps)]
        epoch_losses.append(float(np.mean(losses)))
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    return {"index": strategy.cluster_resolver.task_id, "replicas": strategy.num_replicas_in_sync,
            "steps": steps * epochs, "samples": steps * epochs * global_batch // workers,
            "loss": epoch_losses, "weights_sha256": hashlib.sha256(weights.tobytes()).hexdigest()}


# ---------------- defined in notebooks/06_scaling_out.ipynb, section: 4. The tf.data service: preprocessing on other machines
HEARTBEAT_MS = 200          # workers report to the dispatcher five times a second …
WORKER_TIMEOUT_MS = 2_000   # … and one silent for two seconds is taken as gone


def start_dispatcher(port):
    """Start the tf.data service's dispatcher on `port` (0: any free one); it serves until
    `.stop()` or until its process ends."""
    service = tf.data.experimental.service
    return service.DispatchServer(
        service.DispatcherConfig(port=port, worker_timeout_ms=WORKER_TIMEOUT_MS))


def start_worker(dispatcher, port=0):
    """Start a tf.data service worker that registers with the dispatcher at `dispatcher`
    ("host:port")."""
    service = tf.data.experimental.service
    return service.WorkerServer(service.WorkerConfig(dispatcher_address=dispatcher, port=port,
                                                     heartbeat_interval_ms=HEARTBEAT_MS))


# ---------------- defined in notebooks/06_scaling_out.ipynb, section: 5. Conversion at scale with Apache Beam
def encode_chunk_dofn():
    """The Beam DoFn class that turns the start of a chunk of records into the chunk's records,
    as serialized tf.train.Examples: raw uint8 pixels under "image", an int64 "label"."""
    import apache_beam as beam

    class EncodeChunk(beam.DoFn):
        def __init__(self, images_path, labels_path, chunk):
            self.paths, self.chunk = (str(images_path), str(labels_path)), chunk

        def setup(self):   # once per DoFn instance: the source, memory-mapped
            self.images, self.labels = (np.load(p, mmap_mode="r") for p in self.paths)

        def process(self, start):   # records start … start + chunk - 1
            for i in range(start, min(start + self.chunk, len(self.labels))):
                yield tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[np.ascontiguousarray(self.images[i]).tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[int(self.labels[i])])),
                })).SerializeToString(deterministic=True)   # the same bytes every time

    return EncodeChunk


# ---------------- defined in notebooks/06_scaling_out.ipynb, section: 5. Conversion at scale with Apache Beam
def build_conversion(pipeline, images_path, labels_path, output_prefix, num_shards, chunk=1_000):
    """Add the conversion to a Beam `pipeline`: chunk starts → encoded records → `num_shards`
    TFRecord files. `chunk`: records per unit of work."""
    import apache_beam as beam

    total = len(np.load(labels_path, mmap_mode="r"))
    encode_chunk = encode_chunk_dofn()(images_path, labels_path, chunk)
    return (pipeline
            | "Chunks" >> beam.Create(list(range(0, total, chunk)))
            | "Encode" >> beam.ParDo(encode_chunk)
            | "Write" >> beam.io.WriteToTFRecord(output_prefix, file_name_suffix=".tfrecord",
                                                 num_shards=num_shards,
                                                 shard_name_template="-SSSSS-of-NNNNN"))


# ---------------- defined in notebooks/06_scaling_out.ipynb, section: 5. Conversion at scale with Apache Beam
def records_digest(files):
    """How many records the files hold, and a SHA-256 of their sorted per-record hashes: equal for
    the same records in any order and any split into files."""
    import hashlib

    records = tf.data.TFRecordDataset([str(f) for f in files]).as_numpy_iterator()
    hashes = sorted(hashlib.sha256(record).digest() for record in records)
    return len(hashes), hashlib.sha256(b"".join(hashes)).hexdigest()
