# Generated from notebooks/07_capstone_photos.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""07 · Capstone: your own folder of photos, end to end: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import tensorflow as tf
import keras


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 2. The baseline: `image_dataset_from_directory`
def augmentation(seed=None):
    """Random changes that keep a photo's class: a mirror image, a shift of up to a tenth of each
    side, a change of contrast. Keras layers: inside a model or in a tf.data pipeline."""
    return keras.Sequential([keras.layers.RandomFlip("horizontal", seed=seed),
                             keras.layers.RandomTranslation(0.1, 0.1, seed=seed),
                             keras.layers.RandomContrast(0.2, seed=seed)], name="augmentation")


def photo_classifier(input_shape=(96, 96, 3), num_classes=8, *, augment=False, learning_rate=3e-3,
                     steps_per_execution=1):
    """Float pixels from 0 to 255 in, class probabilities out (float32 under mixed precision)."""
    inputs = keras.Input(shape=input_shape)
    x = augmentation()(inputs) if augment else inputs
    x = keras.layers.Rescaling(1 / 255)(x)
    for filters in (16, 32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name="photo_classifier")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), metrics=["accuracy"],
                  loss="sparse_categorical_crossentropy", steps_per_execution=steps_per_execution)
    return model


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 4. Conversion: resized once, or the original bytes
def jpeg_bytes(path):
    """A photo file's bytes as a JPEG: as they are when it is one, whatever its name says;
    re-encoded when it is another format TensorFlow decodes (a PNG named .jpg)."""
    data = tf.io.read_file(str(path))
    if data.numpy()[:3] == b"\xff\xd8\xff":   # every JPEG file starts with these bytes
        return data.numpy()
    pixels = tf.io.decode_image(data, channels=3, expand_animations=False)
    return tf.io.encode_jpeg(pixels, quality=95).numpy()


def resized_pixels(data, size):
    """A JPEG's pixels resized to size×size RGB, uint8, decoded at the smallest scale (1, 1/2,
    1/4 or 1/8) that keeps both sides at least `size`."""
    height, width, _ = tf.io.extract_jpeg_shape(data).numpy()
    ratio = max(r for r in (1, 2, 4, 8) if r == 1 or min(height, width) // r >= size)
    image = tf.io.decode_jpeg(data, channels=3, ratio=ratio)
    return tf.cast(tf.round(tf.image.resize(image, (size, size))), tf.uint8).numpy()


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 4. Conversion: resized once, or the original bytes
def photo_record(image, label):
    """A serialized tf.train.Example in notebook 02's layout: `image` bytes (raw pixels, or a
    JPEG file's bytes) and an int64 `label`."""
    feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(image)])),
               "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


def resized_record(path, label, size):
    """A resized-once record: the photo decoded and resized once, kept as raw pixels."""
    return photo_record(resized_pixels(jpeg_bytes(path), size).tobytes(), label)


def original_record(path, label):
    """An original-bytes record: the JPEG file as it is."""
    return photo_record(jpeg_bytes(path), label)


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 5. The decode-and-augment pipeline
def parse_records(serialized):
    """A record, or a batch of them: (the `image` bytes, the label as int32)."""
    features = tf.io.parse_example(serialized, {"image": tf.io.FixedLenFeature([], tf.string),
                                                "label": tf.io.FixedLenFeature([], tf.int64)})
    return features["image"], tf.cast(features["label"], tf.int32)


def record_files(files, *, shuffle=False, parallel_reads=4, seed=None):
    """The records of TFRecord `files`, `parallel_reads` of them read at once; with `shuffle`,
    the files in a new order every epoch."""
    ds = tf.data.Dataset.from_tensor_slices([str(f) for f in files])
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed)
    if parallel_reads == 1:   # one file after another
        return ds.interleave(tf.data.TFRecordDataset, cycle_length=1)
    return ds.interleave(tf.data.TFRecordDataset, cycle_length=parallel_reads,
                         num_parallel_calls=parallel_reads, deterministic=False)


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 5. The decode-and-augment pipeline
def read_photos(files, batch_size, size, *, records=None, shuffle=False, shuffle_buffer=1_000,
                augment=None, parallel_reads=4, seed=None):
    """Batches of (float32 pixels 0-255, int32 labels) from resized-once records; the Keras
    layers `augment`, when given, applied on the host. `records`: how many the files hold."""
    ds = record_files(files, shuffle=shuffle, parallel_reads=parallel_reads, seed=seed)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed)

    def parse(batch):
        images, labels = parse_records(batch)
        pixels = tf.reshape(tf.io.decode_raw(images, tf.uint8), (-1, size, size, 3))
        return tf.cast(pixels, tf.float32), labels

    ds = ds.batch(batch_size)
    if records is not None:   # a known length: fit knows where an epoch ends (checked at its end)
        ds = ds.apply(tf.data.experimental.assert_cardinality(-(-records // batch_size)))
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if augment is not None:   # cast back: under mixed precision the layers compute in 16 bits
        ds = ds.map(lambda x, y: (tf.cast(augment(x, training=True), tf.float32), y),
                    num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 5. The decode-and-augment pipeline
def random_window(data):
    """[top, left, height, width] of a random window of 25-100 % of a JPEG photo's area, from
    its header alone."""
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.io.extract_jpeg_shape(data), tf.zeros([1, 0, 4]), area_range=(0.25, 1.0),
        aspect_ratio_range=(3 / 4, 4 / 3), min_object_covered=0.0,
        use_image_if_no_bounding_boxes=True)
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def decode_photo(record, size, crop=False):
    """An original-bytes record as (float32 pixels 0-255, size×size; int32 label); with `crop`,
    a random window, and only that window decoded."""
    data, label = parse_records(record)
    if crop:
        image = tf.io.decode_and_crop_jpeg(data, random_window(data), channels=3)
    else:
        image = tf.io.decode_jpeg(data, channels=3)
    return tf.image.resize(image, (size, size)), label


def read_originals(files, batch_size, size, *, crop=False, cache=None, parallel_reads=4):
    """Batches like read_photos' from original-bytes records; with `cache` (a file name), the
    photos decoded in the first epoch and read back from that file afterwards."""
    ds = record_files(files, parallel_reads=parallel_reads)
    ds = ds.map(lambda record: decode_photo(record, size, crop),
                num_parallel_calls=tf.data.AUTOTUNE)
    if cache is not None:
        ds = ds.cache(cache)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
