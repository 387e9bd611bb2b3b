"""Reading the charts the server draws as SVG images (app/svg_parts.py: the Alerts step chart, the
Kernel page's charts): the images a page shows, parsed, and what their `data-*` attributes say."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET

SVG_URL = "data:image/svg+xml;base64,"
TITLE = "{http://www.w3.org/2000/svg}title"


def svg_images(at) -> list[ET.Element]:
    """Every SVG image the page shows (`st.image` of an SVG: a data URL), parsed, in page order."""
    urls = [i.url for image in at.get("image") for i in image.proto.imgs if i.url.startswith(SVG_URL)]
    return [parse(url) for url in urls]


def parse(url: str) -> ET.Element:
    """An SVG data URL's picture, parsed (it must be well-formed XML)."""
    return ET.fromstring(base64.b64decode(url[len(SVG_URL) :]))


def charts_by_key(at) -> dict[str, ET.Element]:
    """The page's charts by the `data-key` each says it is (kernel_charts: build_chart, ncu_chart, ...)."""
    return {chart.get("data-key"): chart for chart in svg_images(at) if chart.get("data-key")}


def role(element: ET.Element, name: str) -> list[ET.Element]:
    return [e for e in element.iter() if e.get("data-role") == name]


def series(chart: ET.Element) -> dict[str, list[ET.Element]]:
    """Each drawn series' points by the series' name, in drawing order."""
    return {group.get("data-name"): role(group, "point") for group in role(chart, "series")}


def values(chart: ET.Element) -> dict[str, list[float]]:
    """Each series' values (y), in drawing order."""
    return {name: [float(p.get("data-value")) for p in points] for name, points in series(chart).items()}


def tip(element: ET.Element) -> str:
    """The element's tooltip (its SVG <title>)."""
    return element.find(TITLE).text
