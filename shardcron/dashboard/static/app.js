// shardcron dashboard: the job timeline (live, by server-sent events) and the health charts.
// htmx does the rest (filters, paging, the shard grid's live updates, the actions).
(function () {
  "use strict";

  // Every colour comes from dashboard/present.py, on the page (<body data-colours>): none is defined here.
  var COLOURS = JSON.parse(document.body.dataset.colours);
  var STATUS_COLOURS = COLOURS.status;
  var STATUSES = Object.keys(STATUS_COLOURS);
  var TIMELINE_POINTS = 500;

  function width(el) { return Math.max(320, el.clientWidth - 16); }

  // One point (or all at one time) would make uPlot span years around it: show a minute either side.
  function padded(u, min, max) { return min === max ? [min - 60, max + 60] : [min, max]; }

  // -- the job timeline: one point per tick, x = its slot, y = how late it started --------
  // A tick that missed a deadline is ringed: one more series, drawn over the status points.
  function late(p) { return p.lateness_ms === null ? 0 : p.lateness_ms; }
  function inMs(u, v) { return v === null ? "" : v + " ms"; }
  function timelineData(points) {
    var bySlot = new Map();
    points.forEach(function (p) { bySlot.set(p.slot_ms + ":" + p.manual, p); });
    var sorted = Array.from(bySlot.values()).sort(function (a, b) { return a.slot_ms - b.slot_ms; })
      .slice(-TIMELINE_POINTS);
    var data = [sorted.map(function (p) { return p.slot_ms / 1000; })];
    STATUSES.forEach(function (status) {
      data.push(sorted.map(function (p) { return p.status === status ? late(p) : null; }));
    });
    data.push(sorted.map(function (p) { return p.missed.length ? late(p) : null; }));
    var missed = sorted.filter(function (p) { return p.missed.length; }).length;
    return {points: sorted, data: data, missed: missed};
  }

  // A live event is the leader's own record of the tick, which does not carry what is recorded on its
  // row afterwards (its missed deadlines, its ack): keep what the page was given for that tick
  // (a miss, once recorded, is never undone).
  function keepRecorded(points, p) {
    points.forEach(function (known) {
      if (known.slot_ms !== p.slot_ms || known.manual !== p.manual) { return; }
      if (!p.missed.length) { p.missed = known.missed; }
      if (p.acked === "—") { p.acked = known.acked; }
    });
    return p;
  }

  function cell(text, cls) {
    var td = document.createElement("td");
    if (cls) { var span = document.createElement("span"); span.className = cls; span.textContent = text; td.appendChild(span); }
    else { td.textContent = text; }
    return td;
  }

  function missedBadges(td, p) {
    p.missed.forEach(function (m) {
      var badge = document.createElement("span");
      badge.className = "status missed";
      badge.title = m.title;
      badge.textContent = m.text;
      td.append(" ", badge);
    });
    return td;
  }

  function showTick(tbody, p) {
    var existing = tbody.querySelector('tr[data-slot="' + p.slot_ms + '"]');
    var row = document.createElement("tr");
    row.dataset.slot = String(p.slot_ms);
    row.dataset.status = p.status;
    row.appendChild(cell(p.slot + (p.manual ? " manual" : "")));
    row.appendChild(missedBadges(cell(p.status, "status s-" + p.status), p));
    row.appendChild(cell(String(p.attempt)));
    row.appendChild(cell(p.started));
    row.appendChild(cell(p.lateness_ms === null ? "—" : p.lateness_ms + "ms"));
    row.appendChild(cell(p.finished));
    row.appendChild(cell(p.acked));
    row.appendChild(cell(p.node));
    row.appendChild(cell(String(p.fence)));
    row.appendChild(cell(p.error, p.error ? "err" : null));
    if (existing) { existing.replaceWith(row); } else { tbody.prepend(row); }
  }

  function startTimeline(el) {
    var source = document.getElementById("timeline-data");
    var points = source ? JSON.parse(source.textContent) : [];
    var series = [{}].concat(STATUSES.map(function (status) {
      return {label: status, stroke: STATUS_COLOURS[status], fill: STATUS_COLOURS[status], paths: function () { return null; },
              points: {show: true, size: 7, fill: STATUS_COLOURS[status]}, value: inMs};
    })).concat([{label: "missed a deadline", stroke: COLOURS.missed, paths: function () { return null; },
                 points: {show: true, size: 13, width: 2, stroke: COLOURS.missed, fill: "transparent"},
                 value: inMs}]);
    var shown = timelineData(points);
    var chart = new uPlot({width: width(el), height: 220, series: series,
                           axes: [{}, {label: "lateness (ms)"}], scales: {x: {time: true, range: padded}}}, shown.data, el);
    el.dataset.points = String(shown.points.length);
    el.dataset.missed = String(shown.missed);
    var tbody = document.getElementById("tick-rows");
    var events = new EventSource(el.dataset.events);
    events.addEventListener("tick", function (e) {
      var p = keepRecorded(points, JSON.parse(e.data));
      points.push(p);
      shown = timelineData(points);
      points = shown.points;
      chart.setData(shown.data);
      el.dataset.points = String(shown.points.length);
      el.dataset.missed = String(shown.missed);
      el.dataset.lastStatus = p.status;
      if (tbody) { showTick(tbody, p); }
    });
    events.addEventListener("watch-error", function (e) {
      el.dataset.error = JSON.parse(e.data).watch_error;
      events.close();  // the server has ended this watch (refused, or its token revoked): no reconnecting
    });
    window.addEventListener("resize", function () { chart.setSize({width: width(el), height: 220}); });
  }

  // -- health: lateness percentiles per shard, and the fault counters, over time ----------
  function lines(t, byShard, unit) {
    var shards = Object.keys(byShard);
    return {
      series: [{}].concat(shards.map(function (s, i) {
        return {label: "shard " + s, stroke: COLOURS.series[i % COLOURS.series.length], spanGaps: true,
                value: function (u, v) { return v === null ? "" : v + unit; }};
      })),
      data: [t].concat(shards.map(function (s) { return byShard[s]; }))
    };
  }

  function drawHealth(root, charts) {
    fetch(root.dataset.source, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (h) {
      document.getElementById("health-empty").hidden = h.t.length > 0;
      var specs = {
        "chart-p99": lines(h.t, h.lateness_p99_ms, " ms"),
        "chart-p50": lines(h.t, h.lateness_p50_ms, " ms"),
        "chart-events": {series: [{}, {label: "fenced writes", stroke: COLOURS.counters.fenced},
                                  {label: "caught-up slots", stroke: COLOURS.counters.caught_up},
                                  {label: "failed ticks", stroke: COLOURS.counters.failed}],
                         data: [h.t, h.fenced, h.caught_up, h.failed]}
      };
      Object.keys(specs).forEach(function (id) {
        var el = document.getElementById(id);
        var spec = specs[id];
        if (!charts[id] || charts[id].series.length !== spec.series.length) {
          if (charts[id]) { charts[id].destroy(); }
          charts[id] = new uPlot({width: width(el), height: 200, series: spec.series,
                                  scales: {x: {time: true, range: padded}}}, spec.data, el);
        } else {
          charts[id].setData(spec.data);
        }
      });
      root.dataset.samples = String(h.t.length);
    }).catch(function (err) { root.dataset.error = String(err); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var timeline = document.getElementById("timeline");
    if (timeline) { startTimeline(timeline); }
    var health = document.getElementById("health-charts");
    if (health) {
      var charts = {};
      drawHealth(health, charts);
      setInterval(function () { drawHealth(health, charts); }, 5000);
    }
    // Pause and resume change what the page shows (state, next run, the button): show it anew.
    document.body.addEventListener("job-changed", function () {
      setTimeout(function () { window.location.reload(); }, 800);
    });
  });
})();
