"""Where the sun stands, seen from a grid point at an instant: the solar zenith angle and
the sunlight reaching the top of the atmosphere, as forcings a weather model takes.

The sun's place is the Astronomical Almanac's low-precision solar coordinates (good to
about 0.01 degrees between 1950 and 2050, and slowly worse outside), counted in days `n`
from J2000.0 (2000-01-01 12:00, Julian date 2451545.0; the Unix epoch is n = -10957.5):

    mean longitude  L = 280.460 + 0.9856474 n           (degrees)
    mean anomaly    g = 357.528 + 0.9856003 n
    ecliptic long.  l = L + 1.915 sin g + 0.020 sin 2g
    obliquity       e = 23.439 - 0.0000004 n
    declination     sin d = sin e sin l
    right ascension a = atan2(cos e sin l, cos l)
    distance        R = 1.00014 - 0.01671 cos g - 0.00014 cos 2g   (astronomical units)
    sidereal time   GMST = 280.46061837 + 360.98564736629 n

The hour angle at longitude lon (east positive) is H = GMST - a + lon, and

    cos(zenith) = sin(lat) sin d + cos(lat) cos d cos H,

clipped at 0 (the sun below the horizon gives no light), as earthkit-meteo and anemoi
define `cos_solar_zenith_angle`. The flux at the top of the atmosphere is S / R^2 times
that, with S = 1361 W m-2 (the reference total solar irradiance GraphCast and ecRad use).
Accumulated over the hour ending at the valid time (ERA5's and GraphCast's
`toa_incident_solar_radiation`, J m-2), it is integrated in closed form: over one hour the
declination and distance are held at the hour's middle and H turns at the mean solar rate
(2 pi per 86400 s), so the integral of max(0, A + B cos H) dH is exact (`_daylight`).

The per-instant terms (`sun_positions`) are numpy float64 on the host, one per sample and
step; the grid terms (`cos_zenith`, `hour_insolation`) take any array namespace with
numpy's elementwise functions (numpy, or torch on the batch's device) and broadcast the
per-instant terms against the grid's coordinates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core.longitude_columns import LongitudeColumns

SOLAR_CONSTANT = 1361.0  # W m-2: total solar irradiance at 1 astronomical unit
SECONDS_PER_DAY = 86_400.0
UNIX_EPOCH_J2000_DAYS = -10_957.5  # 1970-01-01 00:00 counted from J2000.0 in days
ACCUMULATION_SECONDS = 3_600.0  # ERA5's toa_incident_solar_radiation: the hour before
_TWO_PI = 2.0 * math.pi
_EARTH_TURN = _TWO_PI / SECONDS_PER_DAY  # radians of hour angle per second
ACCUMULATION_RADIANS = ACCUMULATION_SECONDS * _EARTH_TURN  # the hour's turn of the Earth
SMALL_PRODUCT = 65_536  # multiply-adds of one BLAS product on the host (`_small_products`)


@dataclass(frozen=True)
class SunPositions:
    """The sun at some instants, as the grid formulas need it (arrays of one shape).

    Args:
        sin_declination: sine of the sun's declination.
        cos_declination: its cosine (>= 0).
        greenwich_hour_angle: the sun's hour angle at longitude 0, radians in [0, 2 pi).
        inverse_distance_squared: (1 AU / Earth-sun distance)^2.
    """

    sin_declination: np.ndarray
    cos_declination: np.ndarray
    greenwich_hour_angle: np.ndarray
    inverse_distance_squared: np.ndarray

    def stacked(self) -> np.ndarray:
        """The four terms stacked on a last axis of 4 (one copy to a device, not four)."""
        return np.stack(
            [
                self.sin_declination,
                self.cos_declination,
                self.greenwich_hour_angle,
                self.inverse_distance_squared,
            ],
            axis=-1,
        )


def sun_positions(unix_seconds: np.ndarray) -> SunPositions:
    """The sun at `unix_seconds` (UTC seconds since 1970-01-01, float64), by the module's
    formulas.

    Args:
        unix_seconds: the instants, any shape.
    """
    n = np.asarray(unix_seconds, dtype=np.float64) / SECONDS_PER_DAY + UNIX_EPOCH_J2000_DAYS
    mean_longitude = np.deg2rad(np.remainder(280.460 + 0.9856474 * n, 360.0))
    anomaly = np.deg2rad(np.remainder(357.528 + 0.9856003 * n, 360.0))
    ecliptic = mean_longitude + np.deg2rad(1.915 * np.sin(anomaly) + 0.020 * np.sin(2 * anomaly))
    obliquity = np.deg2rad(23.439 - 0.0000004 * n)
    sin_declination = np.sin(obliquity) * np.sin(ecliptic)
    right_ascension = np.arctan2(np.cos(obliquity) * np.sin(ecliptic), np.cos(ecliptic))
    sidereal = np.deg2rad(np.remainder(280.46061837 + 360.98564736629 * n, 360.0))
    distance = 1.00014 - 0.01671 * np.cos(anomaly) - 0.00014 * np.cos(2 * anomaly)
    return SunPositions(
        sin_declination=sin_declination,
        cos_declination=np.sqrt(1.0 - sin_declination**2),
        greenwich_hour_angle=np.remainder(sidereal - right_ascension, _TWO_PI),
        inverse_distance_squared=1.0 / distance**2,
    )


def cos_zenith(
    xp: Any, sun: Any, sin_latitude: Any, cos_latitude: Any, longitude: Any, *, clip: bool = True
) -> Any:
    """cos(solar zenith angle) at every point, clipped at 0 unless `clip` is False.

    Args:
        xp: the array namespace (numpy, or torch) of the arrays given.
        sun: `SunPositions.stacked()` (as an array of `xp`), shape (..., 4), with the
            trailing axes it must broadcast against the grid's already added (e.g.
            (B, S, 1, 1, 4)).
        sin_latitude: sine of the grid's latitudes, broadcastable to the grid.
        cos_latitude: cosine of them.
        longitude: the grid's longitudes in radians (east positive), broadcastable.
        clip: whether to clip at 0 (the `cos_solar_zenith_angle` forcing does).
    """
    a, b = _zenith_terms(sun, sin_latitude, cos_latitude)
    cosine = xp.multiply(b, xp.cos(sun[..., 2] + longitude))  # the one whole-grid array
    xp.add(cosine, a, out=cosine)
    return xp.clip(cosine, 0.0, None, out=cosine) if clip else cosine


def hour_insolation(
    xp: Any,
    sun_at_middle: Any,
    sin_latitude: Any,
    cos_latitude: Any,
    longitude: Any,
    *,
    solar_constant: float = SOLAR_CONSTANT,
    seconds: float = ACCUMULATION_SECONDS,
) -> Any:
    """The solar energy reaching the top of the atmosphere (J m-2) over the `seconds`
    ending at each instant, in closed form (see the module).

    Args:
        xp: the array namespace (numpy, or torch).
        sun_at_middle: `SunPositions.stacked()` at the middle of each period (the end
            instant minus `seconds / 2`), shaped as `cos_zenith` takes it.
        sin_latitude: sine of the grid's latitudes, broadcastable to the grid.
        cos_latitude: cosine of them.
        longitude: the grid's longitudes in radians, broadcastable.
        solar_constant: the total solar irradiance at 1 AU (W m-2).
        seconds: the period's length (at most a day).
    """
    a, b = _zenith_terms(sun_at_middle, sin_latitude, cos_latitude)
    b = xp.clip(b, 0.0, None)  # cos(latitude) rounds below 0 at the poles in float32
    scale = solar_constant * sun_at_middle[..., 3] / _EARTH_TURN  # per instant: J m-2 per rad
    a, b = a * scale, b * scale
    turn = seconds * _EARTH_TURN
    end = sun_at_middle[..., 2] + longitude + 0.5 * turn
    return _daylight(xp, a, b, _half_day(xp, a, b), end, turn)


def cos_zenith_by_rows(
    xp: Any,
    sun: Any,
    sin_latitude: Any,
    cos_latitude: Any,
    columns: LongitudeColumns,
    *,
    clip: bool = True,
    out: Any = None,
) -> Any:
    """`cos_zenith` on a grid of rows of latitude and columns of longitude: one
    contraction over the grid (`core.longitude_columns`), then the clip.

    Args:
        xp: the array namespace (numpy, or torch).
        sun: as `cos_zenith` takes it, shaped `(..., 1, 1, 4)`.
        sin_latitude: sine of the grid's latitudes, shaped `(..., rows, 1)`: varying
            along the axes before the last only.
        cos_latitude: cosine of them, likewise.
        columns: the grid's longitudes (`core.longitude_columns.longitude_columns`).
        clip: whether to clip at 0 (the `cos_solar_zenith_angle` forcing does).
        out: with numpy, a float32 array of the result's shape to write it into (memory
            reused saves the first touch of fresh pages), or None.
    """
    a, b = _zenith_terms(sun, sin_latitude, cos_latitude)
    cosine = _rows_by_columns(xp, a, b, sun[..., 2], columns, out)
    return xp.clip(cosine, 0.0, None, out=cosine) if clip else cosine


def hour_insolation_by_rows(
    xp: Any,
    sun_at_middle: Any,
    sin_latitude: Any,
    cos_latitude: Any,
    columns: LongitudeColumns,
    *,
    solar_constant: float = SOLAR_CONSTANT,
    seconds: float = ACCUMULATION_SECONDS,
    out: Any = None,
) -> Any:
    """`hour_insolation` on a grid of rows of latitude and columns of longitude, in two
    passes over the grid and one over the points whose hour holds a sunrise or a sunset
    (a twelfth of them) instead of about a dozen passes, equal to it within float32
    rounding.

    Every other hour is all day or all night: all day, the integral of A + B cos H over
    the hour [H - h, H + h] is 2 h A + 2 sin(h) B cos H, a contraction of rows and columns
    (`core.longitude_columns`); all night that is negative, and clipped to 0. The hours
    that hold a sunrise or a sunset (H within h of -h0 or of h0) are computed in closed
    form, as `hour_insolation` computes them, on the runs of columns there
    (`_terminator_hours`), and written over it.

    Args:
        xp: the array namespace (numpy, or torch).
        sun_at_middle: as `hour_insolation` takes it, shaped `(..., 1, 1, 4)`.
        sin_latitude: sine of the grid's latitudes, shaped `(..., rows, 1)`: varying
            along the axes before the last only.
        cos_latitude: cosine of them, likewise.
        columns: the grid's longitudes (`core.longitude_columns.longitude_columns`),
            made for spans of at least `seconds` of the Earth's turn.
        solar_constant: the total solar irradiance at 1 AU (W m-2).
        seconds: the period's length (at most a day).
        out: with numpy, a C-contiguous float32 array of the result's shape to write it
            into, or None.
    """
    half_turn = 0.5 * seconds * _EARTH_TURN
    if columns.span < 2 * half_turn:
        raise ValueError(
            f"the columns' runs span {columns.span} radians, less than the period's {2 * half_turn}"
        )
    a, b = _zenith_terms(sun_at_middle, sin_latitude, cos_latitude)
    b = xp.clip(b, 0.0, None)  # cos(latitude) rounds below 0 at the poles in float32
    greenwich = sun_at_middle[..., 2]
    scale = solar_constant * sun_at_middle[..., 3] / _EARTH_TURN  # J m-2 per radian
    a, b = a * scale, b * scale  # the flux's terms, per radian of the Earth's turn
    energy = _rows_by_columns(
        xp, a * (2.0 * half_turn), b * (2.0 * math.sin(half_turn)), greenwich, columns, out
    )
    xp.clip(energy, 0.0, None, out=energy)
    _terminator_hours(xp, energy, a[..., 0], b[..., 0], greenwich[..., 0], columns, half_turn)
    return energy


def _terminator_hours(
    xp: Any,
    energy: Any,
    a: Any,
    b: Any,
    greenwich: Any,
    columns: LongitudeColumns,
    half_turn: float,
) -> None:
    """Write over `energy` (C-contiguous, `(..., rows, columns)`) the hours that hold a
    sunrise or a sunset, in closed form: on each row the runs of columns within the
    hour's span east of each terminator's western edge (`LongitudeColumns.search`).

    A row's terminators are at H = +h0 (sunset) and -h0 (sunrise); the western edge of
    a terminator's run is where the hour's end first reaches it, W = T - G - h (mod 2
    pi). A column at longitude lon of the run (unwrapped past 2 pi where it runs past
    the seam) has its hour's end at G + lon + h = T + (lon - W) modulo whole turns, so
    the end is taken as lon minus a term of the row, `W - T`: one pass, and near [-pi,
    pi] where G + lon may be several turns (the hour's light does not change with whole
    turns). The arithmetic runs on `(window, 2, *rows)` arrays, so the row's terms
    broadcast along the long trailing axes, not along a run. On the host only the rows
    whose sun rises and sets are computed (at a solstice a quarter of the rows of a global
    grid are in polar day or night, where the contraction is already exact).

    Args:
        xp: the array namespace (numpy, or torch).
        energy: the hour's energy on the grid, J m-2, written in place.
        a: A of the flux A + B cos H, J m-2 per radian, per row: shaped `(..., rows)`.
        b: B of it (>= 0), likewise.
        greenwich: the hour angle at longitude 0 at the hour's middle, `(..., 1)`.
        columns: the grid's columns.
        half_turn: h, half the hour's turn of the Earth (radians).
    """
    cosine = _sunset_cosine(xp, a, b)  # (..., rows)
    half_day = xp.arccos(xp.clip(cosine, -1.0, 1.0))
    flat = _flat_view(xp, energy)
    width = energy.shape[-1]
    if xp is np:  # the rows whose sun rises and sets, one axis (polar day and night are
        # all one or the other); on a device, every row (a count would wait for it)
        kept = np.flatnonzero(np.abs(cosine) < 1.0)
        a, b, half_day, greenwich = (
            np.broadcast_to(term, cosine.shape).reshape(-1)[kept]
            for term in (a, b, half_day, greenwich)
        )
        row_starts = kept * width
    else:
        row_starts = xp.arange(0, flat.shape[0], width, device=energy.device)
        row_starts = row_starts.reshape(energy.shape[:-1])
    terminators = xp.stack((half_day, -half_day))  # (2, *rows): sunset, sunrise
    western = terminators - (greenwich + half_turn)
    western -= _TWO_PI * xp.floor(western * (1.0 / _TWO_PI))  # [0, 2 pi], as search takes
    placed, radians = columns.search(xp, western)  # (window, 2, *rows)
    end = xp.subtract(radians, western - terminators, out=radians)  # the hour's end
    exact = _daylight(xp, a, b, half_day, end, 2.0 * half_turn)
    flat[placed + row_starts] = exact


def _flat_view(xp: Any, array: Any) -> Any:
    """`array`'s memory as one axis, written through (refused where it is not
    C-contiguous: a reshape would copy it, and the writes would be lost)."""
    contiguous = array.flags.c_contiguous if xp is np else array.is_contiguous()
    if not contiguous:
        raise ValueError("the forcing's output must be C-contiguous")
    return array.reshape(-1)


def _rows_by_columns(
    xp: Any,
    constant: Any,
    amplitude: Any,
    greenwich: Any,
    columns: LongitudeColumns,
    out: Any,
) -> Any:
    """constant + amplitude cos(greenwich + lon) over the grid, as one contraction of the
    rows' (constant, amplitude cos G, -amplitude sin G) with the columns' harmonics."""
    rows = xp.concatenate(
        (
            constant,
            amplitude * xp.cos(greenwich),
            amplitude * -xp.sin(greenwich),
        ),
        -1,
    )
    if xp is not np:
        return xp.einsum("...k,kl->...l", rows, columns.harmonics)
    if out is None:
        shape = (*rows.shape[:-1], columns.count)
        out = np.empty(shape, np.result_type(rows, columns.harmonics))
    _small_products(rows, columns.harmonics, out)
    return out


def _small_products(rows: np.ndarray, harmonics: np.ndarray, out: np.ndarray) -> None:
    """`out = rows @ harmonics` ((..., 3) by (3, columns); `rows` and `out` C-contiguous)
    as a stack of products of at most `SMALL_PRODUCT` multiply-adds each.

    BLAS computes such a product at about twice einsum's speed (whose loop over the 3
    terms runs once per point), but threads a large one: numpy's OpenBLAS did at 0.25
    degrees (721 x 3 x 1440 a sample), spending 79 ms of CPU a batch of 8 where einsum
    spends 14, on a host whose cores the decode threads already use. A product this
    small runs on the calling thread: here OpenBLAS kept products of up to 720,000
    multiply-adds on it and threaded one of 2.8 million (where it switches is a setting
    of each BLAS build, hence the margin).
    """
    width = harmonics.shape[-1]
    matrix = _flat_view(np, out).reshape(-1, width)
    flat_rows = rows.reshape(-1, harmonics.shape[0])
    per_block = max(1, SMALL_PRODUCT // harmonics.size)
    whole = flat_rows.shape[0] // per_block * per_block
    if whole:
        blocks = flat_rows[:whole].reshape(-1, per_block, harmonics.shape[0])
        np.matmul(blocks, harmonics, out=matrix[:whole].reshape(-1, per_block, width))
    if whole < flat_rows.shape[0]:
        np.matmul(flat_rows[whole:], harmonics, out=matrix[whole:])


def _zenith_terms(sun: Any, sin_latitude: Any, cos_latitude: Any) -> tuple[Any, Any]:
    """A and B of cos(zenith) = A + B cos(H)."""
    return sin_latitude * sun[..., 0], cos_latitude * sun[..., 1]


def _half_day(xp: Any, a: Any, b: Any) -> Any:
    """h0, the hour angle of sunset (radians in [0, pi]): cos h0 = -A / B; pi where the
    sun never sets, 0 where it never rises (B = 0 at a pole: all day or none)."""
    return xp.arccos(xp.clip(_sunset_cosine(xp, a, b), -1.0, 1.0))


def _sunset_cosine(xp: Any, a: Any, b: Any) -> Any:
    """-A / B, cos h0 where the sun rises and sets (within (-1, 1)); at most -1 where it
    never sets, at least 1 where it never rises (-sign(A) at a pole, where B = 0)."""
    return xp.where(b > 0, -a / xp.where(b > 0, b, 1.0), -xp.sign(a))


def _daylight(xp: Any, a: Any, b: Any, half_day: Any, end: Any, turn: float) -> Any:
    """The integral of max(0, A + B cos H) dH over the `turn` radians (at most a whole
    turn) up to `end` (any reals; overwritten): F(end) - F(end - turn) for the
    antiderivative F that is continuous over every H: within a turn (H in [-pi, pi]) the
    light lies between -h0 and h0, where cos h0 = -A / B (`half_day`; h0 = pi: the sun
    never sets; 0: it never rises), and F adds a day's light at every whole turn. The end
    is brought into [-pi, pi], then the start, `turn` before it: where that takes it
    across -pi, the period holds the turn's edge, and a day's light is added. A, B and
    h0 vary with latitude and H with longitude, so the terms of the day stay as small as
    their inputs; the rest is a few passes over the points."""
    day = 2.0 * (a * half_day + b * xp.sin(half_day))
    xp.subtract(end, _TWO_PI * xp.round(end * (1.0 / _TWO_PI)), out=end)
    start = end - turn
    turns_back = xp.round(start * (1.0 / _TWO_PI))  # -1 where the start crossed -pi, else 0
    xp.subtract(start, _TWO_PI * turns_back, out=start)
    # each end clipped to the day's light, -h0 .. h0 (where the grid's shape is made)
    last = xp.minimum(end, half_day)
    xp.maximum(last, -half_day, out=last)
    first = xp.minimum(start, half_day)
    xp.maximum(first, -half_day, out=first)
    # the light: A (last - first) + B (sin last - sin first) + a day per turn back
    energy = xp.subtract(last, first)
    xp.multiply(energy, a, out=energy)
    xp.subtract(energy, turns_back * day, out=energy)
    xp.sin(first, out=first)
    xp.sin(last, out=last)
    xp.subtract(last, first, out=last)
    xp.multiply(last, b, out=last)
    xp.add(energy, last, out=energy)
    return energy
