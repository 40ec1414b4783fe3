"""The checkerboard ground and the sky, each drawn with one image warp."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np


#: The sky is drawn at 1/this resolution, then upscaled.
SKY_SUBSAMPLE = 8
#: Light left in the shadows on the ground (fraction).
GROUND_SHADOW = 0.62


@dataclass(frozen=True)
class GroundStyle:
    """The checkerboard ground, the sky and the haze between them.

    Attributes:
        square: checker square side [m] (1 m like pybullet's plane.urdf, so that both
            renderers show the same floor).
        light, dark: (3,) RGB colours of the squares in [0, 1].
        haze: horizon colour the ground fades into, shared with the bottom of the sky.
        zenith: colour at the top of the sky.
        haze_distance: distance [m] at which the ground is ~63% hazed.
        extent: half side [m] of the textured ground around the camera (haze beyond).
        texel: texture resolution [m per texel].
    """

    square: float = 1.0
    light: tuple[float, float, float] = (0.90, 0.90, 0.88)
    dark: tuple[float, float, float] = (0.60, 0.69, 0.84)
    haze: tuple[float, float, float] = (0.80, 0.84, 0.90)
    zenith: tuple[float, float, float] = (0.42, 0.60, 0.88)
    haze_distance: float = 7.0
    extent: float = 12.0
    texel: float = 0.02


class Ground:
    """Checkerboard ground and sky, drawn with one homography and one affine warp.

    Args:
        style: colours and sizes.
        focal_px: the camera's focal length [px], to pre-filter the texture for it.
        eye_height: typical camera height above the ground [m] (for the pre-filter only).
    """

    def __init__(self, style: GroundStyle, focal_px: float, eye_height: float = 0.9) -> None:
        self.style = style
        self.period = 2 * style.square
        n = int(round(2 * style.extent / style.texel))
        self.texture_size = n
        # Texel centres in metres relative to the camera's ground point (texture centre).
        coords: np.ndarray = (np.arange(n, dtype=np.float32) + 0.5) * style.texel - style.extent
        x = coords[None, :]
        y = coords[:, None]
        r2 = x * x + y * y
        # Pre-filtered checker: each 1-D square wave becomes a clipped sine with an edge
        # ramp as wide as the footprint of a pixel on the ground at that distance
        # (~ r^2 / (f h) along the view for a camera h above the ground), so far squares
        # blend into their mean instead of aliasing (a poor man's mip-map).
        ramp = 1.5 * style.texel + r2 / (focal_px * eye_height)
        gain = style.square / (np.pi * ramp)
        cx = np.clip(gain * np.sin(np.pi * x / style.square), -1.0, 1.0)
        cy = np.clip(gain * np.sin(np.pi * y / style.square), -1.0, 1.0)
        mix = 0.5 + 0.5 * cx * cy  # 1 on light squares, 0 on dark
        light, dark, haze = (np.asarray(c, dtype=np.float32) * 255 for c in (style.light, style.dark, style.haze))
        colour = dark + mix[..., None] * (light - dark)
        # Haze 1 - exp(-(r / haze_distance)^2): light in the robot's workspace, thick
        # towards the horizon; rescaled to be complete at the texture's inscribed circle
        # so that its edge (haze colour beyond) never shows.
        fog = np.clip((1.0 - np.exp(-r2 / style.haze_distance ** 2))
                      / (1.0 - np.exp(-(style.extent / style.haze_distance) ** 2)), 0.0, 1.0)[..., None]
        self.texture = np.ascontiguousarray((colour + fog * (haze - colour)).round().astype(np.uint8))
        ramp_rows = 256
        t = np.linspace(0.0, 1.0, ramp_rows, dtype=np.float32)[:, None] ** 0.6
        zenith = np.asarray(style.zenith, dtype=np.float32) * 255
        sky = haze + t * (zenith - haze)
        self.sky_ramp = np.repeat(sky[:, None, :], 2, axis=1).round().astype(np.uint8)  # (256, 2, 3)
        self.haze_rgb = tuple(int(round(c)) for c in haze)

    def draw(self, image: np.ndarray, K: np.ndarray, R_wc: np.ndarray, camera_position: np.ndarray) -> None:
        """Fill ``image`` (H, W, 3) with sky and ground for a camera at ``camera_position``
        (3,) [m] with OpenCV-frame orientation ``R_wc`` (3, 3) and intrinsics ``K``."""
        h, w = image.shape[:2]
        K_inv = np.linalg.inv(K)
        # Horizon: pixels p whose ray R_wc K^-1 p is horizontal, i.e. horizon . p = 0;
        # positive above the horizon (sky).
        horizon = K_inv.T @ (R_wc.T @ np.array([0.0, 0.0, 1.0]))
        image_corners = np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=float)
        sky_polygon = _clip_polygon_2d(image_corners, horizon)
        ground_polygon = _clip_polygon_2d(image_corners, -horizon) if camera_position[2] > 1e-3 else np.empty((0, 2))
        if len(sky_polygon) >= 3 or len(ground_polygon) < 3:
            self._draw_sky(image, horizon)
        if len(ground_polygon) < 3:
            return
        # Ground z = 0 seen by the camera: pixel ~ K R_cw [X - c]; with texel (s, t) and
        # X = extent_origin + texel * (s + 0.5, t + 0.5), compose into one homography.
        # The texture is centred on the camera's ground point snapped to the checker
        # period, so the pattern stays fixed in the world while the haze follows the eye.
        style = self.style
        centre = np.round(camera_position[:2] / self.period) * self.period
        R_cw = R_wc.T
        t_cw = -R_cw @ camera_position
        plane_to_pixel = K @ np.column_stack([R_cw[:, 0], R_cw[:, 1], t_cw])
        texel_to_plane = np.array([[style.texel, 0.0, centre[0] - style.extent + 0.5 * style.texel],
                                   [0.0, style.texel, centre[1] - style.extent + 0.5 * style.texel],
                                   [0.0, 0.0, 1.0]])
        # Texture column s is x on the ground, row t is y. Only the rows from the top of
        # the ground polygon down are warped, into OpenCV pixel coordinates (centres at
        # integers: -0.5).
        top = int(np.clip(np.floor(ground_polygon[:, 1].min()), 0, h - 1))
        to_roi_pixels = np.array([[1.0, 0, -0.5], [0, 1.0, -0.5 - top], [0, 0, 1.0]])
        H = to_roi_pixels @ plane_to_pixel @ texel_to_plane
        if len(sky_polygon) < 3:  # all ground: straight into the image
            cv2.warpPerspective(self.texture, H, (w, h - top), dst=image[top:], flags=cv2.INTER_LINEAR,
                                borderMode=cv2.BORDER_CONSTANT, borderValue=self.haze_rgb)
            return
        ground = cv2.warpPerspective(self.texture, H, (w, h - top), flags=cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_CONSTANT, borderValue=self.haze_rgb)
        # Keep the ground only below the horizon: above it the homography maps rays to
        # the ground point behind the camera.
        mask = np.zeros((h - top, w), np.uint8)
        roi_polygon = ground_polygon - np.array([0.5, 0.5 + top])
        cv2.fillConvexPoly(mask, np.round(roi_polygon * 16).astype(np.int32), (255,), cv2.LINE_8, 4)
        cv2.copyTo(ground, mask, image[top:])

    def _draw_sky(self, image: np.ndarray, horizon: np.ndarray) -> None:
        """Fill ``image`` with the sky gradient above the ``horizon`` line (3,) (pixels p
        with horizon . (p, 1) > 0 are above it; below it the haze colour)."""
        h, w = image.shape[:2]
        # The ramp row grows with the (image-space) distance above the horizon line,
        # reaching the zenith colour ~1.2 image heights above it. The sky is smooth, so it
        # is drawn at 1/8 resolution and upscaled (a full-size linear warp costs ~1 ms).
        rows = self.sky_ramp.shape[0] - 1
        scale = np.linalg.norm(horizon[:2])
        small_w, small_h = -(-w // SKY_SUBSAMPLE), -(-h // SKY_SUBSAMPLE)
        sx, sy = w / small_w, h / small_h
        if scale > 1e-12:
            a, b, c0 = horizon * (rows / (1.2 * h) / scale)
        else:  # looking straight up or down: uniform
            a, b, c0 = 0.0, 0.0, float(rows if horizon[2] > 0 else 0)
        # Small pixel (i, j) has its centre at full-size continuous ((j+0.5) sx, (i+0.5) sy).
        warp = np.array([[0.0, 0.0, 0.5], [a * sx, b * sy, c0 + 0.5 * (a * sx + b * sy)]])
        small = cv2.warpAffine(self.sky_ramp, warp, (small_w, small_h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                               borderMode=cv2.BORDER_REPLICATE)
        cv2.resize(small, (w, h), dst=image, interpolation=cv2.INTER_LINEAR)


def _clip_polygon_2d(polygon: np.ndarray, line: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman: the part of a convex (N, 2) polygon where line . (p, 1) >= 0."""
    values = polygon @ line[:2] + line[2]
    out = []
    n = len(polygon)
    for i in range(n):
        j = (i + 1) % n
        if values[i] >= 0:
            out.append(polygon[i])
        if (values[i] >= 0) != (values[j] >= 0):
            s = values[i] / (values[i] - values[j])
            out.append(polygon[i] + s * (polygon[j] - polygon[i]))
    return np.array(out).reshape(-1, 2)
