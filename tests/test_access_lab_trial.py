"""User trial BC, the lab: a researcher with red-green colour blindness who works by keyboard and reads through a
screen reader. Only one of the lab's eight control sections could be opened without a mouse; sliders and the
three-way choices had no spoken name or state; the panels had no text; a slider's float noise re-scored and renamed
the config. Each test is one of those, checked on the widget tree a front-end draws."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import ipywidgets as W
import pytest

from toolkit.config import load_config
from toolkit.lab import Lab
from toolkit.loaders import Dataset

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"


@pytest.fixture(scope="module")
def lab(demo_store):
    ds = Dataset.open(DEMO)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield Lab(demo_store, ds.queries("dev"), ds.qrels("dev"), config=load_config("qmd"),
                  baseline=load_config("bm25-only"), debounce_s=0.0)


def _tree(w: W.Widget):
    yield w
    for child in getattr(w, "children", ()) or ():
        yield from _tree(child)


def test_every_section_is_picked_from_a_list_the_keyboard_reaches(lab):
    """Accordion headers have tabIndex -1 and no role: a <select> picks the section instead."""
    widgets = list(_tree(lab.widget))
    assert not any(isinstance(w, W.Accordion) for w in widgets)
    assert isinstance(lab.section_pick, W.Dropdown) and lab.section_pick.description == "settings"
    titles = [t for t, _ in lab.section_pick.options]
    assert titles == ["fusion", "rerank blend", "dedup", "threshold", "routing", "priors", "guardrails", "export"]
    for i in range(len(titles)):
        lab.section_pick.value = i
        assert lab.sections.children == (lab.section_boxes[i],)
    lab.section_pick.value = 0


def test_every_control_has_a_spoken_name_and_every_slider_a_labelled_number_box(lab):
    """A slider's handle has no accessible name; a labelled number field beside it does, and typing into it
    moves the slider and the config. Three-way choices are radio inputs, whose selection is announced."""
    widgets = list({id(w): w for root in (lab.widget, *lab.section_boxes) for w in _tree(root)}.values())
    sliders = [w for w in widgets if isinstance(w, W.FloatSlider | W.IntSlider)]
    boxes = [w for w in widgets if isinstance(w, W.BoundedFloatText | W.BoundedIntText)]
    assert len(sliders) >= 20 and len(boxes) == len(sliders)
    inputs = (W.Text, W.FloatText, W.BoundedFloatText, W.BoundedIntText, W.Dropdown, W.RadioButtons, W.Checkbox)
    unnamed = [type(w).__name__ for w in widgets if isinstance(w, inputs) and not w.description.strip()]
    assert unnamed == []
    assert all(w.description.strip() or w.tooltip for w in widgets if isinstance(w, W.Button))
    assert not any(isinstance(w, W.ToggleButtons) for w in widgets)
    assert isinstance(lab.controls["fusion.method"], W.RadioButtons)

    slider = lab.controls["fusion.lexical_weight"]
    box = next(b for b in boxes if b.description == slider.description)
    box.value = 2.5
    time.sleep(0.3)
    assert slider.value == 2.5 and lab.config.fusion.lexical_weight == 2.5
    lab.set("fusion.lexical_weight", 1.0)
    assert box.value == 1.0


def test_a_sliders_float_noise_is_no_change(lab):
    """The slider sent 1.0000000000000002 for 1.0: every query was re-scored and the config was named
    "qmd + technical lexical boost 1" with nothing moved."""
    before, label = lab.updates, lab.session.label
    lab._on_change("routing.technical_lexical_boost", lab.session.value_for("routing.technical_lexical_boost") + 2e-16)
    time.sleep(0.3)
    assert lab.updates == before and lab.session.label == label == "qmd"


def test_every_figure_says_in_words_what_it_shows(lab):
    """The SVGs had no text; the tick labels were read run together. Each figure has a paragraph under it, read
    from its own spec, and plotly's toolbar is two buttons (eleven Tab stops per figure before)."""
    text = {name: slot.text.value for name, slot in lab._slots.items() if not slot.table}
    assert set(text) == {"metrics", "spread", "trajectory", "routing"}
    assert "Metrics: qmd vs bm25-only" in text["metrics"] and "nDCG@10: " in text["metrics"] and "p = " in text["metrics"]
    assert "Score spread" in text["spread"] and "spread &lt; 0.01" in text["spread"] and "median" in text["spread"]
    assert "Relevant documents across stages" in text["trajectory"] and " then final " in text["trajectory"]
    assert "queries per route" in text["routing"] and "technical" in text["routing"]
    for name in text:
        slot = lab._slots[name]
        assert slot.text in slot.view.children
        if slot.live:
            assert slot.widget._config["modeBarButtons"] == [["toImage", "resetScale2d"]]


def test_a_bucket_weights_float_noise_is_no_change_either(lab):
    """The review: a bucket slider's 0.30000000000000004 re-scored and renamed the config, as the other sliders did."""
    buckets = [tuple(b) for b in lab.session.value_for("rerank.buckets")]
    before, label = lab.updates, lab.session.label
    noisy = [(bound, weight + 1e-16) for bound, weight in buckets]
    lab._on_change("rerank.buckets", noisy)
    time.sleep(0.3)
    assert lab.updates == before and lab.session.label == label
