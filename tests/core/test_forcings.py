"""The forcings' formulas (`core.solar_geometry`, `core.progress_features`, `core.forcings`)
against independent implementations, over a year of dates and the whole globe:

- cos(solar zenith angle) and the TOA solar energy of the hour ending at the valid time
  against earthkit-meteo's (`earthkit.meteo.solar`, what anemoi computes them with). Its
  sun is a Fourier fit of the day of year (declination and equation of time), ours the
  Astronomical Almanac's; the two differ by up to about 0.007 in cos(zenith), so the
  stated tolerance is 0.01, and 0.01 of the hour's full sun (1361 W m-2 * 3600 s) for
  the energy. earthkit integrates with 60 Gauss intervals an hour here.
- the closed-form hour integral against a fine numerical integral of our own flux
  (1e-4 of the full sun): the integral itself, without the two suns' difference.
- year and day progress against GraphCast's definitions computed independently, with
  Python's datetime arithmetic (float64, then float32 as GraphCast does).
- the calendars: a model's year progress, Julian dates shifted to the Unix epoch as
  cftime dates them, and the sun refused on a model's calendar.
"""

from __future__ import annotations

import datetime as dt
import math

import cftime
import numpy as np
import pytest
import torch
from earthkit.meteo.solar import cos_solar_zenith_angle, toa_incident_solar_radiation
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core import progress_features, solar_geometry
from insitubatch_nodes.core.forcing_names import (
    FORCINGS,
    check_forcing_names,
    check_forcings,
    chosen_names,
    group_forcings,
)
from insitubatch_nodes.core.forcings import (
    check_calendar,
    forcing_values,
    grid_terms,
    instant_seconds,
)
from insitubatch_nodes.core.longitude_columns import longitude_columns

EPOCH = dt.datetime(1970, 1, 1)
LATITUDE = np.linspace(-90.0, 90.0, 37)[:, None]  # every 5 degrees, poles included
LONGITUDE = np.arange(-180.0, 180.0, 7.5)[None, :]
FULL_SUN_HOUR = solar_geometry.SOLAR_CONSTANT * 3600.0
# a year of valid times, every 61 hours (every hour of the day comes up), at odd minutes
YEAR = [
    dt.datetime(2021, 1, 1) + dt.timedelta(hours=61 * k, minutes=7 * k % 60) for k in range(144)
]


def _seconds(when: dt.datetime) -> float:
    return (when - EPOCH).total_seconds()


def _grid(latitude: np.ndarray = LATITUDE, longitude: np.ndarray = LONGITUDE):
    return np.sin(np.deg2rad(latitude)), np.cos(np.deg2rad(latitude)), np.deg2rad(longitude)


def test_cos_zenith_is_earthkit_meteos_over_a_year_and_the_globe() -> None:
    sin_lat, cos_lat, lon = _grid()
    lat2d, lon2d = np.broadcast_arrays(LATITUDE, LONGITUDE)
    worst = 0.0
    for when in YEAR:
        sun = solar_geometry.sun_positions(np.array(_seconds(when))).stacked()
        ours = solar_geometry.cos_zenith(np, sun, sin_lat, cos_lat, lon)
        theirs = cos_solar_zenith_angle(when, lat2d, lon2d)
        assert ours.min() == 0.0 and ours.max() <= 1.0  # clipped at 0, as theirs
        worst = max(worst, float(np.abs(ours - theirs).max()))
    assert worst < 0.01


def test_hour_insolation_is_earthkit_meteos_over_a_year_and_the_globe() -> None:
    sin_lat, cos_lat, lon = _grid()
    lat2d, lon2d = np.broadcast_arrays(LATITUDE, LONGITUDE)
    worst = 0.0
    for when in YEAR[::3]:
        middle = solar_geometry.sun_positions(np.array(_seconds(when) - 1800.0)).stacked()
        ours = solar_geometry.hour_insolation(np, middle, sin_lat, cos_lat, lon)
        theirs = toa_incident_solar_radiation(
            when - dt.timedelta(hours=1), when, lat2d, lon2d, intervals_per_hour=60
        )
        worst = max(worst, float(np.abs(ours - theirs).max()))
    assert worst < 0.01 * FULL_SUN_HOUR


def test_the_closed_form_hour_is_the_integral_of_the_flux() -> None:
    """Sunrise and sunset inside the hour, polar day and night: the closed form equals a
    fine midpoint sum of the clipped flux (the sun held at the hour's middle)."""
    sin_lat, cos_lat, lon = _grid(np.linspace(-90.0, 90.0, 73)[:, None])
    for when in YEAR[::7]:
        middle = solar_geometry.sun_positions(np.array(_seconds(when) - 1800.0)).stacked()
        ours = solar_geometry.hour_insolation(np, middle, sin_lat, cos_lat, lon)
        cuts = 2000
        total = np.zeros(np.broadcast_shapes(sin_lat.shape, lon.shape))
        for k in range(cuts):
            turned = middle.copy()
            turned[..., 2] += (k + 0.5 - cuts / 2) / cuts * (2 * math.pi / 24)
            flux = solar_geometry.cos_zenith(np, turned, sin_lat, cos_lat, lon)
            total += flux * middle[..., 3] * solar_geometry.SOLAR_CONSTANT * 3600.0 / cuts
        np.testing.assert_allclose(ours, total, atol=1e-4 * FULL_SUN_HOUR)


@settings(max_examples=100, deadline=None)
@given(
    st.datetimes(min_value=dt.datetime(1950, 1, 1), max_value=dt.datetime(2100, 1, 1)),
    st.floats(-90.0, 90.0),
    st.floats(-180.0, 360.0),
)
def test_the_hour_at_any_place_and_date_is_the_integral_of_the_flux(
    when: dt.datetime, latitude: float, longitude: float
) -> None:
    sin_lat, cos_lat, lon = _grid(np.array([[latitude]]), np.array([[longitude]]))
    middle = solar_geometry.sun_positions(np.array(_seconds(when) - 1800.0)).stacked()
    ours = solar_geometry.hour_insolation(np, middle, sin_lat, cos_lat, lon)
    cuts = 4000
    turned = np.repeat(middle[None], cuts, axis=0)
    turned[:, 2] += (np.arange(cuts) + 0.5 - cuts / 2) / cuts * (2 * math.pi / 24)
    flux = solar_geometry.cos_zenith(np, turned, sin_lat[0, 0], cos_lat[0, 0], lon[0, 0])
    total = flux.sum() * middle[3] * solar_geometry.SOLAR_CONSTANT * 3600.0 / cuts
    assert abs(float(ours[0, 0]) - total) <= 1e-4 * FULL_SUN_HOUR


def test_the_sun_stands_where_the_almanac_says() -> None:
    """Published values: the declination at the 2021 June solstice (2021-06-21 03:32 UTC)
    is +23.44 degrees, at the December one (12-21 15:59) -23.44; the Earth is nearest the
    sun (0.98329 AU) on 2021-01-02 and farthest (1.01673 AU) on 2021-07-05."""
    when = np.array(
        [_seconds(dt.datetime(2021, 6, 21, 3, 32)), _seconds(dt.datetime(2021, 12, 21, 15, 59))]
    )
    sun = solar_geometry.sun_positions(when)
    np.testing.assert_allclose(
        np.rad2deg(np.arcsin(sun.sin_declination)), [23.44, -23.44], atol=0.01
    )
    apsides = np.array(
        [_seconds(dt.datetime(2021, 1, 2, 14)), _seconds(dt.datetime(2021, 7, 5, 22))]
    )
    distance = 1 / np.sqrt(solar_geometry.sun_positions(apsides).inverse_distance_squared)
    np.testing.assert_allclose(distance, [0.98329, 1.01673], atol=2e-4)


def _graphcast_year_progress(when: dt.datetime) -> np.float32:
    seconds = int((when - EPOCH).total_seconds())
    return np.float32(math.fmod(seconds / 86400 / 365.24219, 1.0) % 1.0)


def _graphcast_day_progress(when: dt.datetime, longitude: float) -> np.float32:
    seconds = int((when - EPOCH).total_seconds())
    return np.float32((seconds % 86400 / 86400 + longitude / 360) % 1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.datetimes(min_value=dt.datetime(1950, 1, 1), max_value=dt.datetime(2100, 1, 1)),
    st.floats(-180.0, 360.0),
)
def test_year_and_day_progress_are_graphcasts(when: dt.datetime, longitude: float) -> None:
    when = when.replace(microsecond=0)  # GraphCast counts whole seconds
    seconds = np.array([_seconds(when)])
    year = progress_features.year_progress(seconds)
    assert year.dtype == np.float32
    assert abs(float(year[0]) - float(_graphcast_year_progress(when))) <= 1e-6
    fraction = progress_features.day_fraction(seconds)
    day = progress_features.day_progress(np, fraction, np.array([longitude])).astype(np.float32)
    theirs = _graphcast_day_progress(when, longitude)
    gap = abs(float(day[0]) - float(theirs))
    assert min(gap, 1 - gap) <= 1e-6  # both in [0, 1): 0.9999999 and 0 are one instant


def test_year_progress_starts_at_the_epoch_and_turns_every_tropical_year() -> None:
    year_seconds = 365.24219 * 86400
    seconds = np.array([0.0, year_seconds / 4, year_seconds / 2, 3 * year_seconds])
    np.testing.assert_allclose(
        progress_features.year_progress(seconds), [0, 0.25, 0.5, 0], atol=1e-6
    )


def test_a_models_calendar_has_its_own_year() -> None:
    """1 March is 59/365 of every noleap year and 60/360 of every 360_day year; dates are
    counted from the calendar's own 1970-01-01 (`TimeAxis.dates`)."""
    for calendar, days in (("noleap", 365), ("360_day", 360), ("all_leap", 366)):
        dates = [cftime.datetime(y, 3, 1, calendar=calendar) for y in (1850, 1970, 2101)]
        counted = cftime.date2num(dates, "seconds since 1970-01-01", calendar)
        progress = progress_features.year_progress(np.asarray(counted, np.float64), calendar)
        first = {"noleap": 59, "360_day": 60, "all_leap": 60}[calendar]
        np.testing.assert_allclose(progress, first / days, atol=1e-6)


def test_julian_dates_are_shifted_to_the_unix_epoch() -> None:
    """A Julian date counted from the Julian 1970-01-01 is the instant cftime gives it in
    the proleptic Gregorian calendar."""
    dates = [cftime.datetime(y, 5, 17, 6, calendar="julian") for y in (1500, 1900, 2000)]
    counted = cftime.date2num(dates, "microseconds since 1970-01-01", "julian")
    seconds = instant_seconds(np.asarray(counted, np.int64).astype("M8[us]"), "julian")
    real = [
        cftime.date2num(
            cftime.datetime(*d.timetuple()[:6], calendar="julian").change_calendar(
                "proleptic_gregorian"
            ),
            "seconds since 1970-01-01",
            "proleptic_gregorian",
        )
        for d in dates
    ]
    np.testing.assert_array_equal(seconds, real)


def test_the_sun_is_refused_on_a_models_calendar() -> None:
    for calendar in ("noleap", "all_leap", "360_day"):
        check_calendar(["year_progress_sin", "day_progress_cos", "cos_latitude"], calendar)
        with pytest.raises(
            ValueError,
            match=r"\['cos_solar_zenith_angle', 'toa_incident_solar_radiation'\] need real dates",
        ):
            check_calendar(
                ["cos_solar_zenith_angle", "toa_incident_solar_radiation", "year_progress_sin"],
                calendar,
            )
    for calendar in progress_features.REAL_CALENDARS:
        check_calendar(list(FORCINGS), calendar)


def test_unknown_and_repeated_names_are_refused_listing_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown forcing 'solar_zenith'; the known forcings are \['cos_latitude'"
    ):
        check_forcing_names(["cos_latitude", "solar_zenith"])
    with pytest.raises(ValueError, match="more than once"):
        check_forcing_names(["cos_latitude", "cos_latitude"])
    with pytest.raises(TypeError, match="list of names"):
        check_forcing_names("cos_latitude")
    assert check_forcing_names(None) == ()


def test_torch_computes_what_numpy_does() -> None:
    """The node's namespace (torch) and the tests' (numpy) give the same values."""
    latitude, longitude = LATITUDE[None, None], LONGITUDE[None, None]
    seconds = np.array([[_seconds(w) for w in YEAR[:3]], [_seconds(w) for w in YEAR[5:8]]])
    names = list(FORCINGS)
    by_numpy = forcing_values(
        np,
        names,
        seconds,
        "proleptic_gregorian",
        grid_terms(latitude, longitude, np.asarray),
        np.asarray,
        2,
    )
    by_torch = forcing_values(
        torch,
        names,
        seconds,
        "proleptic_gregorian",
        grid_terms(latitude, longitude, torch.from_numpy),
        torch.from_numpy,
        2,
    )
    for name in names:
        mine, theirs = by_torch[name], by_numpy[name]
        assert mine.dtype == torch.float32 and theirs.dtype == np.float32, name
        scale = FULL_SUN_HOUR if name == "toa_incident_solar_radiation" else 1.0
        np.testing.assert_allclose(mine.numpy(), theirs, atol=2e-6 * scale, err_msg=name)


def _columns_grid(longitude: np.ndarray, dtype: type = np.float64):
    columns = longitude_columns(longitude, solar_geometry.ACCUMULATION_RADIANS, np.asarray, dtype)
    assert columns is not None
    return columns


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.datetimes(min_value=dt.datetime(1950, 1, 1), max_value=dt.datetime(2100, 1, 1)),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(
        [
            np.arange(0.0, 360.0, 1.5),  # ERA5's 1.5 degrees, [0, 360)
            np.arange(-180.0, 180.0, 0.25),  # 0.25 degrees, [-180, 180)
            np.concatenate([np.arange(330.0, 360.0), np.arange(0.0, 41.0)]),  # a box
            np.random.default_rng(0).uniform(-180.0, 360.0, 200),  # scattered
        ]
    ),
)
def test_by_rows_the_sun_is_what_it_is_point_by_point(
    when: list[dt.datetime], longitude: np.ndarray
) -> None:
    """The rows-and-columns arithmetic (`..._by_rows`) against the point-by-point one, in
    float64 so that only the arithmetic differs: the hours holding a sunrise or a sunset
    are all found, whatever the grid, the season (polar day and night) or the hour."""
    latitude = np.linspace(90.0, -90.0, 61)[:, None]  # poles and polar circles included
    sin_lat, cos_lat, lon = _grid(latitude, longitude[None, :])
    columns = _columns_grid(longitude)
    instants = np.array([_seconds(w) for w in when])[:, None, None]
    sun = solar_geometry.sun_positions(instants).stacked()
    middle = solar_geometry.sun_positions(instants - 1800.0).stacked()
    np.testing.assert_allclose(
        solar_geometry.hour_insolation_by_rows(np, middle, sin_lat, cos_lat, columns),
        solar_geometry.hour_insolation(np, middle, sin_lat, cos_lat, lon),
        rtol=0,
        atol=1e-9 * FULL_SUN_HOUR,
    )
    np.testing.assert_allclose(
        solar_geometry.cos_zenith_by_rows(np, sun, sin_lat, cos_lat, columns),
        solar_geometry.cos_zenith(np, sun, sin_lat, cos_lat, lon),
        rtol=0,
        atol=1e-12,
    )


def test_by_rows_an_output_that_cannot_be_written_through_is_refused() -> None:
    """The hours holding a sunrise or a sunset are written through a flat view of the
    output: a strided `out` (where a reshape would copy, and the writes be lost) is
    refused by name, not left with the all-day values there."""
    latitude = np.linspace(90.0, -90.0, 13)[:, None]
    longitude = np.arange(0.0, 360.0, 1.5)
    sin_lat, cos_lat, _ = _grid(latitude, longitude[None, :])
    columns = _columns_grid(longitude)
    middle = solar_geometry.sun_positions(np.array([[[_seconds(YEAR[3])]]])).stacked()
    strided = np.empty((1, 13, 2 * longitude.size))[..., ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        solar_geometry.hour_insolation_by_rows(np, middle, sin_lat, cos_lat, columns, out=strided)


def test_the_forcings_in_float32_by_rows_are_within_rounding_of_float64() -> None:
    """What the loader computes (float32 terms, by rows) against the same formulas in
    float64 point by point, over a year: cos_solar_zenith_angle within 1e-6 and
    toa_incident_solar_radiation within 5e-6 of an hour of full sun (25 J m-2)."""
    latitude = np.linspace(90.0, -90.0, 121)[:, None]
    longitude = np.arange(0.0, 360.0, 1.5)[None, :]
    seconds = np.array([_seconds(w) for w in YEAR])[:, None]
    terms = grid_terms(latitude[None, None], longitude[None, None], np.asarray)
    assert terms.longitude_columns is not None  # the loader's grid is computed by rows
    ours = forcing_values(
        np,
        ["cos_solar_zenith_angle", "toa_incident_solar_radiation"],
        seconds,
        "proleptic_gregorian",
        terms,
        np.asarray,
        2,
    )
    sin_lat, cos_lat, lon = _grid(latitude, longitude)
    shaped = seconds[:, :, None, None]
    sun = solar_geometry.sun_positions(shaped).stacked()
    middle = solar_geometry.sun_positions(shaped - 1800.0).stacked()
    assert ours["cos_solar_zenith_angle"].dtype == np.float32
    np.testing.assert_allclose(
        ours["cos_solar_zenith_angle"],
        solar_geometry.cos_zenith(np, sun, sin_lat, cos_lat, lon),
        rtol=0,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        ours["toa_incident_solar_radiation"],
        solar_geometry.hour_insolation(np, middle, sin_lat, cos_lat, lon),
        rtol=0,
        atol=5e-6 * FULL_SUN_HOUR,
    )


def test_only_a_grid_of_rows_and_columns_is_computed_by_rows() -> None:
    """2-D coordinates (a projected grid) are computed point by point."""
    rows = grid_terms(LATITUDE[None, None], LONGITUDE[None, None], np.asarray)
    assert rows.longitude_columns is not None
    lat2d, lon2d = np.broadcast_arrays(LATITUDE, LONGITUDE)
    curved = grid_terms(lat2d[None, None], lon2d[None, None], np.asarray)
    assert curved.longitude_columns is None


def test_forcings_by_group_are_checked_against_the_spec() -> None:
    """A mapping keeps the spec's order of groups and drops groups given none; a list is
    every group's; a mapping needs a spec and names only its groups."""
    groups = ("inputs", "targets")
    chosen = check_forcings(
        {"targets": [], "inputs": ["cos_latitude", "year_progress_sin"]}, groups
    )
    assert chosen == {"inputs": ("cos_latitude", "year_progress_sin")}
    assert group_forcings(chosen, "inputs") == ("cos_latitude", "year_progress_sin")
    assert group_forcings(chosen, "targets") == ()
    both = check_forcings({"targets": ["cos_latitude"], "inputs": ["year_progress_sin"]}, groups)
    assert list(both) == ["inputs", "targets"]
    assert chosen_names(both) == ("year_progress_sin", "cos_latitude")
    assert check_forcings(["cos_latitude"], groups) == ("cos_latitude",)
    assert group_forcings(("cos_latitude",), "targets") == ("cos_latitude",)
    with pytest.raises(ValueError, match="there is no spec="):
        check_forcings({"inputs": ["cos_latitude"]}, None)
    with pytest.raises(ValueError, match=r"the groups \['input'\], which the spec does not"):
        check_forcings({"input": ["cos_latitude"]}, groups)
    with pytest.raises(ValueError, match="unknown forcing 'sun'"):
        check_forcings({"inputs": ["sun"]}, groups)
