"""The local wiring reads the events stream source's batch size, a template parameter
(`!Ref EventsBatchSize`), at the parameter's default, as a deploy without overrides."""

from __future__ import annotations

from mailqueue_local.cfn import default_template_path, load_template
from mailqueue_local.wiring import from_template


def test_the_events_stream_source_reads_its_parameters_defaults() -> None:
    tpl = load_template(default_template_path())
    props = tpl["Resources"]["EventsStreamSource"]["Properties"]
    assert props["BatchSize"] == {"Ref": "EventsBatchSize"}
    tpl["Parameters"]["EventsBatchSize"]["Default"] = 37  # not the built-in fallback (100)
    w = from_template(tpl, physical={}, configs={"EventsFunction": {}})
    assert [(s.function, s.batch_size) for s in w.streams] == [("events", 37)]
