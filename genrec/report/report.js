// genrec-report: draws the page's charts as inline SVG from the JSON in <script id="report-data">.
// No library, no network: the HTML file is all there is.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                  "#7f7f7f", "#bcbd22"];
  const PARTS = ["data", "forward", "backward", "optimizer", "other"];
  const data = JSON.parse(document.getElementById("report-data").textContent);

  function el(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, attrs, text, parent) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (text !== undefined && text !== null) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "n/a";
    const size = Math.abs(value);
    if (size !== 0 && (size >= 1e5 || size < 1e-3)) return value.toExponential(2);
    if (size >= 100) return value.toFixed(0);
    return Number(value.toPrecision(3)).toString();
  }

  // "nice" axis ticks covering lo..hi
  function ticks(lo, hi, count) {
    if (lo === hi) { lo -= 1; hi += 1; }
    const raw = (hi - lo) / count;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
    const out = [];  // from the last tick at or below lo to the first at or above hi
    for (let t = Math.floor(lo / step + 1e-9) * step; t < hi + step * (1 - 1e-9); t += step) {
      out.push(Number(t.toPrecision(12)));
    }
    return out;
  }

  function frame(container, title, width, height) {
    const figure = html("figure", {class: "chart"}, null, container);
    html("figcaption", {}, title, figure);
    const svg = el("svg", {viewBox: `0 0 ${width} ${height}`, width: width, height: height, role: "img"}, figure);
    el("title", {}, svg).textContent = title;
    return {figure, svg};
  }

  function legend(figure, names) {
    const box = html("div", {class: "legend"}, null, figure);
    names.forEach((name, i) => {
      const item = html("span", {class: "legend-item"}, null, box);
      html("span", {class: "swatch", style: `background:${COLORS[i % COLORS.length]}`}, null, item);
      html("span", {}, name, item);
    });
  }

  function axes(svg, box, x, y, xLabel, yLabel) {
    const g = el("g", {class: "axes"}, svg);
    el("line", {x1: box.left, y1: box.bottom, x2: box.right, y2: box.bottom}, g);
    el("line", {x1: box.left, y1: box.top, x2: box.left, y2: box.bottom}, g);
    for (const t of y.ticks) {
      const py = y.scale(t);
      el("line", {x1: box.left, y1: py, x2: box.right, y2: py, class: "grid"}, g);
      el("text", {x: box.left - 6, y: py + 4, "text-anchor": "end"}, g).textContent = fmt(t);
    }
    for (const t of x.ticks) {
      const px = x.scale(t);
      el("text", {x: px, y: box.bottom + 16, "text-anchor": "middle"}, g).textContent =
        typeof t === "number" ? fmt(t) : t;
    }
    el("text", {x: (box.left + box.right) / 2, y: box.bottom + 34, "text-anchor": "middle", class: "label"}, g)
      .textContent = xLabel;
    el("text", {x: 14, y: (box.top + box.bottom) / 2, "text-anchor": "middle", class: "label",
                transform: `rotate(-90 14 ${(box.top + box.bottom) / 2})`}, g).textContent = yLabel;
  }

  // series: [{name, points: [[x, y], ...]}]
  function lineChart(container, spec) {
    const series = spec.series.filter((s) => s.points && s.points.length);
    if (!series.length) return null;
    const width = 440, height = 260;
    const box = {left: 62, right: width - 12, top: 12, bottom: height - 44};
    const xs = series.flatMap((s) => s.points.map((p) => p[0]));
    const ys = series.flatMap((s) => s.points.map((p) => p[1]));
    let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
    let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    if (spec.fromZero) y0 = Math.min(0, y0);
    const yTicks = ticks(y0, y1, 5), xTicks = ticks(x0, x1, 6);
    [y0, y1] = [Math.min(y0, yTicks[0]), Math.max(y1, yTicks[yTicks.length - 1])];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= 1; y1 += 1; }
    const x = {ticks: xTicks.filter((t) => t >= x0 && t <= x1),
               scale: (v) => box.left + (v - x0) / (x1 - x0) * (box.right - box.left)};
    const y = {ticks: yTicks, scale: (v) => box.bottom - (v - y0) / (y1 - y0) * (box.bottom - box.top)};
    const {figure, svg} = frame(container, spec.title, width, height);
    axes(svg, box, x, y, spec.xLabel, spec.yLabel || "");
    series.forEach((s, i) => {
      const color = COLORS[spec.series.indexOf(s) % COLORS.length];
      const points = s.points.map((p) => `${x.scale(p[0]).toFixed(1)},${y.scale(p[1]).toFixed(1)}`).join(" ");
      el("polyline", {points, fill: "none", stroke: color, "stroke-width": 1.8, class: "series"}, svg);
      if (s.points.length <= 60) {
        for (const p of s.points) {
          const dot = el("circle", {cx: x.scale(p[0]), cy: y.scale(p[1]), r: 2.6, fill: color}, svg);
          el("title", {}, dot).textContent = `${s.name}: ${spec.xLabel} ${fmt(p[0])}, ${fmt(p[1])}`;
        }
      }
    });
    legend(figure, spec.series.map((s) => s.name));
    return figure;
  }

  // categories: [label], series: [{name, values: [number|null]}]
  function barChart(container, spec) {
    const values = spec.series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
    if (!values.length) return null;
    const width = Math.max(440, 80 + spec.categories.length * (18 * spec.series.length + 24));
    const height = 260;
    const box = {left: 62, right: width - 12, top: 12, bottom: height - 44};
    const yTicks = ticks(Math.min(0, ...values), Math.max(...values), 5);
    const [y0, y1] = [yTicks[0], yTicks[yTicks.length - 1]];
    const y = {ticks: yTicks, scale: (v) => box.bottom - (v - y0) / ((y1 - y0) || 1) * (box.bottom - box.top)};
    const slot = (box.right - box.left) / spec.categories.length;
    const x = {ticks: spec.categories, scale: (c) => box.left + (spec.categories.indexOf(c) + 0.5) * slot};
    const {figure, svg} = frame(container, spec.title, width, height);
    axes(svg, box, x, y, spec.xLabel || "", spec.yLabel || "");
    const barWidth = Math.min(18, (slot - 8) / spec.series.length);
    spec.series.forEach((s, i) => {
      s.values.forEach((v, j) => {
        if (v === null || v === undefined) return;
        const left = box.left + j * slot + (slot - barWidth * spec.series.length) / 2 + i * barWidth;
        const top = y.scale(Math.max(v, 0)), bottom = y.scale(Math.min(v, 0));
        const bar = el("rect", {x: left, y: top, width: Math.max(barWidth - 1, 1), height: Math.max(bottom - top, 0.5),
                                fill: COLORS[i % COLORS.length], class: "bar"}, svg);
        el("title", {}, bar).textContent = `${s.name}, ${spec.categories[j]}: ${fmt(v)}`;
      });
    });
    legend(figure, spec.series.map((s) => s.name));
    return figure;
  }

  // rows: [{name, parts: {part: ms}}]: one horizontal bar per run, split by part
  function stackedBars(container, spec) {
    const rows = spec.rows.filter((r) => r.parts);
    if (!rows.length) return null;
    const width = 640, rowHeight = 26, height = 40 + rows.length * rowHeight;
    const box = {left: 150, right: width - 70, top: 8};
    const total = Math.max(...rows.map((r) => PARTS.reduce((sum, p) => sum + (r.parts[p] || 0), 0)));
    const {figure, svg} = frame(container, spec.title, width, height);
    rows.forEach((r, i) => {
      const top = box.top + i * rowHeight;
      el("text", {x: box.left - 8, y: top + 15, "text-anchor": "end"}, svg).textContent = r.name;
      let left = box.left, sum = 0;
      PARTS.forEach((p, k) => {
        const ms = r.parts[p] || 0;
        const w = ms / (total || 1) * (box.right - box.left);
        const rect = el("rect", {x: left, y: top, width: Math.max(w, 0), height: rowHeight - 6,
                                 fill: COLORS[k % COLORS.length], class: "bar"}, svg);
        el("title", {}, rect).textContent = `${r.name}: ${p} ${fmt(ms)} ms`;
        left += w; sum += ms;
      });
      el("text", {x: left + 6, y: top + 15}, svg).textContent = `${fmt(sum)} ms`;
    });
    legend(figure, PARTS);
    return figure;
  }

  const runs = data.runs;
  const grid = (id) => document.getElementById(id);
  const named = (name, run) => runs.length > 1 ? run.label : name;

  // ---- training curves
  function curveCharts() {
    const target = grid("curves-charts");
    if (!target) return;
    const curve = (column, run) => (run.curves[column] || []);
    lineChart(target, {title: "training loss per logged step", xLabel: "step", yLabel: "loss",
                       series: runs.map((r) => ({name: named("train/loss_step", r), points: curve("train/loss_step", r)}))});
    lineChart(target, {title: "training loss per epoch", xLabel: "epoch", yLabel: "loss",
                       series: runs.map((r) => ({name: named("train/loss_epoch", r), points: curve("train/loss_epoch", r)}))});
    const metrics = [...new Set(runs.flatMap((r) => Object.keys(r.curves).filter((c) => c.startsWith("val/"))))].sort();
    if (!metrics.length) return;
    const holder = html("div", {class: "chart-with-control"}, null, target);
    const select = html("select", {id: "val-metric", "aria-label": "validation metric"}, null, holder);
    metrics.forEach((m) => html("option", {value: m}, m, select));
    select.value = metrics.includes(`val/${data.monitor}`) ? `val/${data.monitor}` : metrics[0];
    const chart = html("div", {}, null, holder);
    const draw = () => {
      chart.textContent = "";
      lineChart(chart, {title: `validation ${select.value.slice(4)} per epoch`, xLabel: "epoch", yLabel: select.value.slice(4),
                        series: runs.map((r) => ({name: named(select.value, r), points: curve(select.value, r)}))});
    };
    select.addEventListener("change", draw);
    draw();
  }

  // ---- throughput, step split and memory
  function telemetryCharts() {
    const target = grid("telemetry-charts");
    if (!target) return;
    const series = (column, name) => runs.map((r) => ({name: runs.length > 1 ? r.label : name, points: r.curves[column] || []}));
    lineChart(target, {title: "sequences per second (per process)", xLabel: "step", yLabel: "sequences/s",
                       series: series("telemetry/samples_per_s", "sequences/s"), fromZero: true});
    lineChart(target, {title: "item positions per second (per process)", xLabel: "step", yLabel: "positions/s",
                       series: series("telemetry/positions_per_s", "positions/s"), fromZero: true});
    stackedBars(target, {title: "where a training step's time goes (mean ms per step)",
                         rows: runs.map((r) => ({name: r.label.length > 22 ? "…" + r.label.slice(-21) : r.label,
                                                 parts: r.telemetry ? r.telemetry.parts_ms : null}))});
    lineChart(target, {title: "resident memory (this process)", xLabel: "step", yLabel: "GiB",
                       series: series("telemetry/rss_gib", "RSS"), fromZero: true});
    lineChart(target, {title: "GPU utilisation (NVML)", xLabel: "step", yLabel: "%",
                       series: series("telemetry/gpu_util_pct", "GPU"), fromZero: true});
    lineChart(target, {title: "CUDA memory allocated, peak (torch)", xLabel: "step", yLabel: "GiB",
                       series: series("telemetry/cuda_max_allocated_gib", "max allocated"), fromZero: true});
    const counters = [...new Set(runs.flatMap((r) => Object.keys(r.curves).filter((c) => c.startsWith("telemetry/counters/"))))].sort();
    for (const column of counters) {
      lineChart(target, {title: column.slice("telemetry/counters/".length), xLabel: "step", yLabel: "",
                         series: series(column, column.split("/").pop())});
    }
  }

  // ---- evaluation breakdowns
  function breakdownCharts() {
    const target = grid("breakdown-charts");
    if (!target) return;
    const evaluated = runs.filter((r) => r.evaluation);
    if (!evaluated.length) return;
    const first = evaluated[0].evaluation;
    const names = Object.keys(first.model.breakdowns);
    const metricNames = Object.keys(Object.values(first.model.breakdowns[names[0]])[0]).filter((m) => m !== "users");
    const select = html("select", {id: "breakdown-metric", "aria-label": "breakdown metric"}, null, target);
    metricNames.forEach((m) => html("option", {value: m}, m, select));
    select.value = metricNames.includes(data.monitor) ? data.monitor : metricNames[0];
    const charts = html("div", {class: "charts"}, null, target);
    const draw = () => {
      charts.textContent = "";
      for (const name of names) {
        const groups = Object.keys(first.model.breakdowns[name]);
        const series = evaluated.map((r) => ({
          name: runs.length > 1 ? `${r.model} (${r.label})` : r.model,
          values: groups.map((g) => ((r.evaluation.model.breakdowns[name] || {})[g] || {})[select.value] ?? null)}));
        for (const [baseline, result] of Object.entries(first.baselines || {})) {
          if (!result.breakdowns || !result.breakdowns[name]) continue;
          series.push({name: baseline, values: groups.map((g) => (result.breakdowns[name][g] || {})[select.value] ?? null)});
        }
        const users = groups.map((g) => `${g} (${first.model.breakdowns[name][g].users})`);
        barChart(charts, {title: `test ${select.value} by ${name.replace(/_/g, " ")} (users per group)`,
                          categories: users, series, yLabel: select.value});
      }
    };
    select.addEventListener("change", draw);
    draw();
  }

  // ---- tokenizer health
  function tokenizerCharts() {
    const target = grid("tokenizer-charts");
    if (!target) return;
    const withTables = runs.filter((r) => r.tokenizer);
    const levels = Math.max(0, ...withTables.map((r) => r.tokenizer.levels.length));
    const categories = Array.from({length: levels}, (_, i) => `level ${i}`);
    barChart(target, {title: "share of each codebook used", categories, yLabel: "used / codes",
                      series: withTables.map((r) => ({name: r.label, values: categories.map((_, i) => (r.tokenizer.levels[i] || {}).usage ?? null)}))});
    barChart(target, {title: "normalised entropy of code use (1 = even)", categories, yLabel: "entropy / log2(codes)",
                      series: withTables.map((r) => ({name: r.label, values: categories.map((_, i) => (r.tokenizer.levels[i] || {}).normalized_entropy ?? null)}))});
    for (const r of withTables) {
      lineChart(target, {title: `items per prefix: how many prefixes hold n items (${r.label})`, xLabel: "items sharing the prefix",
                         yLabel: "prefixes", series: (r.tokenizer.prefixes || []).map((p) => ({name: `prefix length ${p.length}`, points: p.histogram}))});
    }
  }

  curveCharts();
  telemetryCharts();
  breakdownCharts();
  tokenizerCharts();
  document.body.setAttribute("data-rendered", String(document.querySelectorAll("figure.chart").length));
})();
