"""Learnable stand-ins for MNIST and CIFAR-10, for quick mode without the real data: digits drawn from stroke
glyphs with random affine jitter and pixel noise, and ten classes of coloured shapes."""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw


def _ellipse(cx: float, cy: float, rx: float, ry: float, n: int = 24) -> list[tuple[float, float]]:
    t = np.linspace(0, 2 * np.pi, n + 1)
    return list(zip(cx + rx * np.cos(t), cy + ry * np.sin(t)))


# Each digit is a list of strokes; each stroke a polyline in a unit box (x right, y down).
DIGIT_STROKES: dict[int, list[list[tuple[float, float]]]] = {
    0: [_ellipse(0.5, 0.5, 0.28, 0.4)],
    1: [[(0.36, 0.25), (0.52, 0.1), (0.52, 0.9)]],
    2: [[(0.25, 0.3), (0.35, 0.14), (0.55, 0.1), (0.72, 0.2), (0.72, 0.38), (0.25, 0.9), (0.8, 0.9)]],
    3: [[(0.25, 0.12), (0.72, 0.12), (0.45, 0.44), (0.7, 0.58), (0.72, 0.78), (0.52, 0.9), (0.25, 0.84)]],
    4: [[(0.66, 0.9), (0.66, 0.1), (0.2, 0.64), (0.82, 0.64)]],
    5: [[(0.75, 0.1), (0.32, 0.1), (0.28, 0.46), (0.55, 0.4), (0.73, 0.55), (0.7, 0.8), (0.5, 0.9), (0.25, 0.84)]],
    6: [[(0.7, 0.1), (0.45, 0.2), (0.3, 0.45), (0.3, 0.75), (0.45, 0.9), (0.65, 0.86), (0.73, 0.66),
         (0.57, 0.5), (0.33, 0.56)]],
    7: [[(0.22, 0.1), (0.8, 0.1), (0.42, 0.9)]],
    8: [_ellipse(0.5, 0.3, 0.18, 0.19), _ellipse(0.5, 0.69, 0.22, 0.21)],
    9: [_ellipse(0.5, 0.32, 0.2, 0.21), [(0.7, 0.32), (0.64, 0.9)]],
}

_SUPERSAMPLE = 4  # draw at 4x and shrink, for anti-aliased strokes like MNIST's


def _random_affine(rng: np.random.Generator) -> np.ndarray:
    """A 2x3 matrix: rotation, anisotropic scale, shear and shift around the box centre."""
    angle = rng.uniform(-0.3, 0.3)
    sx, sy = rng.uniform(0.75, 1.05, size=2)
    shear = rng.uniform(-0.3, 0.3)
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    linear = rot @ np.array([[1.0, shear], [0.0, 1.0]]) @ np.diag([sx, sy])
    shift = rng.uniform(-0.07, 0.07, size=2)
    return np.hstack([linear, (np.array([0.5, 0.5]) + shift - linear @ [0.5, 0.5])[:, None]])


def render_digit(digit: int, rng: np.random.Generator, size: int = 28) -> np.ndarray:
    """One jittered `size`x`size` uint8 image of `digit`, white strokes on black like MNIST.

    >>> render_digit(7, np.random.default_rng(0)).shape
    (28, 28)
    """
    big = size * _SUPERSAMPLE
    image = Image.new("L", (big, big), 0)
    draw = ImageDraw.Draw(image)
    matrix = _random_affine(rng)
    width = int(big * rng.uniform(0.07, 0.12))
    margin = big * 0.14  # MNIST digits sit in a 20x20 box inside the 28x28 frame
    for stroke in DIGIT_STROKES[digit]:
        points = np.asarray(stroke) + rng.normal(0, 0.02, size=(len(stroke), 2))
        points = points @ matrix[:, :2].T + matrix[:, 2]
        pixels = margin + points * (big - 2 * margin)
        draw.line([tuple(p) for p in pixels], fill=255, width=width, joint="curve")
    small = np.asarray(image.resize((size, size), Image.Resampling.BOX), dtype=np.float32)
    small += rng.normal(0, 12, size=small.shape) * (rng.random(small.shape) < 0.15)
    return np.clip(small, 0, 255).astype(np.uint8)


def make_digits(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` MNIST-like digits: images (n, 28, 28) uint8 and labels (n,) uint8, classes balanced.

    >>> x, y = make_digits(100); x.shape, y.dtype
    ((100, 28, 28), dtype('uint8'))
    """
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
    images = np.stack([render_digit(int(d), rng) for d in labels]) if n else np.zeros((0, 28, 28), np.uint8)
    return images, labels


# CIFAR-like classes: a shape and a base colour (RGB, 0-1) for each of ten labels.
CIFAR_LIKE_CLASSES = [
    ("disk", (0.9, 0.2, 0.2)), ("square", (0.2, 0.4, 0.9)), ("triangle", (0.2, 0.8, 0.3)),
    ("horizontal stripes", (0.9, 0.8, 0.2)), ("vertical stripes", (0.7, 0.3, 0.9)), ("checkerboard", (0.2, 0.8, 0.8)),
    ("cross", (0.95, 0.55, 0.15)), ("ring", (0.9, 0.9, 0.9)), ("diagonal stripes", (0.5, 0.25, 0.1)),
    ("blob", (0.95, 0.45, 0.7)),
]


def _shape_mask(label: int, yy: np.ndarray, xx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cy, cx = rng.uniform(0.35, 0.65, size=2)
    r = rng.uniform(0.2, 0.32)
    dy, dx = yy - cy, xx - cx
    period, phase = rng.uniform(0.15, 0.25), rng.uniform(0, 1)
    d2 = dy**2 + dx**2
    shapes = [   # in the order of CIFAR_LIKE_CLASSES
        lambda: d2 < r**2,
        lambda: (abs(dy) < r) & (abs(dx) < r),
        lambda: (dy < r) & (dy > -r + 2 * abs(dx)),
        lambda: ((yy / period + phase) % 1) < 0.5,
        lambda: ((xx / period + phase) % 1) < 0.5,
        lambda: (((yy / period).astype(int) + (xx / period).astype(int)) % 2) == 0,
        lambda: ((abs(dy) < r / 3) & (abs(dx) < r)) | ((abs(dx) < r / 3) & (abs(dy) < r)),
        lambda: (np.sqrt(d2) < r) & (np.sqrt(d2) > r * 0.55),
        lambda: (((yy + xx) / period + phase) % 1) < 0.5,
    ]
    if label == 9:
        return np.clip(1 - d2 / (r * 1.3) ** 2, 0, 1)   # a soft blob
    return shapes[label]().astype(np.float32)


def make_cifar_like(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` CIFAR-10-like images (n, 32, 32, 3) uint8 with labels (n, 1) uint8, like Keras's.

    >>> x, y = make_cifar_like(20); x.shape, y.shape
    ((20, 32, 32, 3), (20, 1))
    """
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32) / 31.0
    images = np.empty((n, 32, 32, 3), dtype=np.uint8)
    for i, label in enumerate(labels):
        mask = _shape_mask(int(label), yy, xx, rng)[..., None]
        colour = np.clip(np.asarray(CIFAR_LIKE_CLASSES[label][1]) + rng.normal(0, 0.08, 3), 0, 1)
        background = rng.uniform(0.0, 0.45, 3) * rng.uniform(0.6, 1.0, (32, 32, 1))
        picture = mask * colour + (1 - mask) * background + rng.normal(0, 0.04, (32, 32, 3))
        images[i] = np.clip(picture * 255, 0, 255).astype(np.uint8)
    return images, labels[:, None]
