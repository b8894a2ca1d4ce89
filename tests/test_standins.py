import numpy as np

from helpers.data import standins


def test_digit_stand_in_is_learnable_by_the_articles_mlp():
    """A 784-512-10 MLP trained 2 epochs on 5,000 stand-in digits must exceed 90% test accuracy."""
    import keras

    keras.utils.set_random_seed(0)
    x_train, y_train = standins.make_digits(5_000, seed=1)
    x_test, y_test = standins.make_digits(1_000, seed=2)
    model = keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train.reshape(-1, 784) / 255.0, y_train, epochs=2, batch_size=32, verbose=0)
    _, accuracy = model.evaluate(x_test.reshape(-1, 784) / 255.0, y_test, verbose=0)
    assert accuracy > 0.90


def test_digit_stand_in_is_not_memorisable_noise():
    x, y = standins.make_digits(200, seed=3)
    assert x.shape == (200, 28, 28) and x.dtype == np.uint8 and y.dtype == np.uint8
    assert np.bincount(y, minlength=10).tolist() == [20] * 10
    # Jitter makes every image different, but digits of one class look alike: the mean
    # distance within a class is smaller than between classes.
    flat = x.reshape(len(x), -1).astype(np.float32)
    centroids = np.stack([flat[y == d].mean(0) for d in range(10)])
    nearest = np.argmin(((flat[:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (nearest == y).mean() > 0.8
    assert len({img.tobytes() for img in x}) == len(x)


def test_cifar_like_classes_are_visually_distinct():
    x, y = standins.make_cifar_like(500, seed=4)
    assert x.shape == (500, 32, 32, 3) and y.shape == (500, 1) and x.dtype == np.uint8
    labels = y[:, 0]
    # Even a nearest-mean-colour classifier on 4x4 thumbnails tells most classes apart.
    thumbs = x.reshape(500, 4, 8, 4, 8, 3).mean(axis=(2, 4)).reshape(500, -1)
    train, test = slice(0, 400), slice(400, 500)
    centroids = np.stack([thumbs[train][labels[train] == c].mean(0) for c in range(10)])
    predicted = np.argmin(((thumbs[test][:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (predicted == labels[test]).mean() > 0.5


def test_stand_ins_are_reproducible():
    assert np.array_equal(standins.make_digits(30, seed=7)[0], standins.make_digits(30, seed=7)[0])
    assert np.array_equal(standins.make_cifar_like(30, seed=7)[0], standins.make_cifar_like(30, seed=7)[0])
