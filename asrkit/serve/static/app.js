// The asrkit page: transcribe from the microphone or a file (HTTP upload or WebSocket stream),
// and follow experiments (curves from train_log.jsonl, WER tables, network, jobs).
// Plain JavaScript, no build step, no libraries.
"use strict";

const $ = (id) => document.getElementById(id);

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  }[c]));
}

async function fetchJSON(url, options) {
  const response = await fetch(url, options);
  let body;
  try {
    body = await response.json();
  } catch (e) {
    throw new Error(`${url}: HTTP ${response.status}`);
  }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function setStatus(id, text, isError) {
  const el = $(id);
  el.textContent = text;
  el.classList.toggle("error", !!isError);
}

// -- results ---------------------------------------------------------------------------------
function wordsTable(words) {
  if (!words || !words.length) return "";
  const rows = words.map((w) => `<tr><td class="word">${escapeHtml(w.word)}</td>` +
    `<td>${w.start.toFixed(2)}</td><td>${w.duration.toFixed(2)}</td>` +
    `<td>${w.confidence.toFixed(2)}<span class="conf" style="width:${Math.round(
      40 * w.confidence)}px"></span></td></tr>`).join("");
  return `<table class="words"><tr><th>word</th><th>start (s)</th><th>duration (s)</th>` +
    `<th>confidence</th></tr>${rows}</table>`;
}

// A transcript view fed stream events: finals accumulate, the partial line shows the rest.
class TranscriptView {
  constructor(prefix) {
    this.prefix = prefix;
    this.finals = [];
    this.render("");
  }

  event(e) {
    if (e.type === "partial") {
      $(`${this.prefix}-partial`).textContent = e.text;
    } else if (e.type === "final") {
      this.finals.push(e);
      this.render("");
    }
  }

  render(partial) {
    const words = this.finals.flatMap((e) => e.words);
    $(`${this.prefix}-partial`).textContent = partial;
    $(`${this.prefix}-${this.prefix === "mic" ? "final" : "text"}`).textContent =
      this.finals.map((e) => e.text).filter((t) => t).join(" ");
    $(`${this.prefix}-words`).innerHTML = wordsTable(words);
  }
}

// -- streaming -------------------------------------------------------------------------------
// Open /v1/stream for PCM at `rate`; `onEvent` gets every JSON message. Resolves when the
// server is ready; returns {send(typedArray), end(), socket, done (a promise)}.
function openStream(rate, format, onEvent) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/v1/stream?rate=${rate}` +
                               `&format=${format}`);
  socket.binaryType = "arraybuffer";
  let finished;
  const done = new Promise((resolve) => { finished = resolve; });
  return new Promise((resolve, reject) => {
    let ready = false;
    socket.onmessage = (m) => {
      const e = JSON.parse(m.data);
      if (e.type === "ready" && !ready) {
        ready = true;
        resolve({
          socket, done,
          send: (samples) => socket.readyState === WebSocket.OPEN && socket.send(samples.buffer),
          end: () => socket.readyState === WebSocket.OPEN &&
            socket.send(JSON.stringify({type: "end"})),
        });
      } else if (e.type === "error" && !ready) {
        reject(new Error(e.message));
      }
      onEvent(e);
      if (e.type === "done") finished(e);
    };
    socket.onerror = () => { if (!ready) reject(new Error("the WebSocket could not open")); };
    socket.onclose = () => { finished(null); if (!ready) reject(new Error("closed")); };
  });
}

function toInt16(floats) {
  const out = new Int16Array(floats.length);
  for (let i = 0; i < floats.length; i++) {
    const v = Math.max(-1, Math.min(1, floats[i]));
    out[i] = v < 0 ? v * 32768 : v * 32767;
  }
  return out;
}

// -- microphone ------------------------------------------------------------------------------
const mic = {context: null, stream: null, media: null, node: null, view: null};

async function micStart() {
  $("mic-start").disabled = true;
  setStatus("mic-status", "starting...");
  try {
    mic.media = await navigator.mediaDevices.getUserMedia({audio: {channelCount: 1}});
    mic.context = new AudioContext();
    const rate = mic.context.sampleRate;
    mic.view = new TranscriptView("mic");
    mic.stream = await openStream(rate, "s16le", (e) => {
      if (e.type === "error") setStatus("mic-status", e.message, true);
      else mic.view.event(e);
    });
    const source = mic.context.createMediaStreamSource(mic.media);
    const send = (floats) => mic.stream.send(toInt16(floats));
    if (mic.context.audioWorklet) {
      await mic.context.audioWorklet.addModule("/static/pcm-worklet.js");
      mic.node = new AudioWorkletNode(mic.context, "pcm-sender");
      mic.node.port.onmessage = (m) => send(m.data);
      source.connect(mic.node);
    } else {  // older browsers: ScriptProcessor on the main thread
      mic.node = mic.context.createScriptProcessor(4096, 1, 1);
      mic.node.onaudioprocess = (e) => send(e.inputBuffer.getChannelData(0));
      source.connect(mic.node);
      mic.node.connect(mic.context.destination);
    }
    setStatus("mic-status", `recording at ${rate} Hz`);
    $("mic-stop").disabled = false;
  } catch (e) {
    setStatus("mic-status", `microphone: ${e.message}`, true);
    await micRelease();
    $("mic-start").disabled = false;
  }
}

async function micRelease() {
  if (mic.node) mic.node.disconnect();
  if (mic.media) mic.media.getTracks().forEach((t) => t.stop());
  if (mic.context) await mic.context.close();
  mic.node = mic.media = mic.context = null;
}

async function micStop() {
  $("mic-stop").disabled = true;
  await micRelease();
  if (mic.stream) {
    mic.stream.end();
    setStatus("mic-status", "finishing...");
    const done = await mic.stream.done;
    setStatus("mic-status", done ? `done: ${done.seconds.toFixed(1)} s of audio` : "closed");
    mic.stream = null;
  }
  $("mic-start").disabled = false;
}

// -- files -----------------------------------------------------------------------------------
async function uploadFile() {
  const file = $("file").files[0];
  if (!file) {
    setStatus("upload-status", "choose a file first", true);
    return;
  }
  $("upload").disabled = true;
  $("upload-partial").textContent = "";
  $("upload-text").textContent = "";
  $("upload-words").innerHTML = "";
  try {
    if ($("file-stream").checked) await streamFile(file);
    else {
      setStatus("upload-status", `uploading ${file.name}...`);
      const form = new FormData();
      form.append("file", file, file.name);
      const r = await fetchJSON("/v1/transcribe", {method: "POST", body: form});
      $("upload-text").textContent = r.text;
      $("upload-words").innerHTML = wordsTable(r.words);
      setStatus("upload-status", `${r.duration.toFixed(2)} s of audio in ${r.seconds.toFixed(2)}` +
                ` s (RTF ${r.rtf})`);
    }
  } catch (e) {
    setStatus("upload-status", e.message, true);
  } finally {
    $("upload").disabled = false;
  }
}

// Decode the file in the browser and stream it in 0.2 s pieces: partial results show as the
// server reads.
async function streamFile(file) {
  setStatus("upload-status", `decoding ${file.name}...`);
  const context = new AudioContext();
  const rate = context.sampleRate;
  let audio;
  try {
    audio = await context.decodeAudioData(await file.arrayBuffer());
  } finally {
    context.close();
  }
  const samples = audio.getChannelData(0);
  const view = new TranscriptView("upload");
  const stream = await openStream(rate, "f32le", (e) => {
    if (e.type === "error") setStatus("upload-status", e.message, true);
    else view.event(e);
  });
  setStatus("upload-status", `streaming ${file.name} at ${rate} Hz...`);
  const piece = Math.round(rate * 0.2);
  for (let i = 0; i < samples.length; i += piece) {
    stream.send(samples.slice(i, i + piece));
    await new Promise((r) => setTimeout(r, 20));
  }
  stream.end();
  const done = await stream.done;
  setStatus("upload-status", done ? `streamed ${done.seconds.toFixed(2)} s` : "closed");
}

// -- charts ----------------------------------------------------------------------------------
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

function niceNumber(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a >= 1000 || a < 0.01 ? v.toExponential(1) : v.toPrecision(3);
}

// Draw series {name: [[x, y], ...]} as lines on `canvas`; the point count goes into
// canvas.dataset.points (the tests read it).
function drawChart(canvas, series) {
  const ctx = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, L = 52, R = 10, T = 10, B = 28;
  ctx.clearRect(0, 0, W, H);
  const all = Object.values(series).flat().filter((p) => Number.isFinite(p[1]));
  canvas.dataset.points = String(all.length);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#888";
  if (!all.length) {
    ctx.fillText("no records yet", W / 2 - 35, H / 2);
    return;
  }
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 += Math.abs(y1) * 0.1 + 1e-9; y0 -= Math.abs(y0) * 0.1 + 1e-9; }
  const px = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = (y) => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  ctx.strokeStyle = "#ccc";
  ctx.beginPath();
  ctx.moveTo(L, T); ctx.lineTo(L, H - B); ctx.lineTo(W - R, H - B);
  ctx.stroke();
  ctx.fillStyle = "#555";
  ctx.fillText(niceNumber(y1), 2, T + 8);
  ctx.fillText(niceNumber(y0), 2, H - B);
  ctx.fillText(String(x0), L, H - B + 14);
  ctx.fillText(`step ${x1}`, W - R - 60, H - B + 14);
  Object.entries(series).forEach(([name, points], k) => {
    ctx.strokeStyle = ctx.fillStyle = COLORS[k % COLORS.length];
    ctx.beginPath();
    points.forEach(([x, y], i) => (i ? ctx.lineTo(px(x), py(y)) : ctx.moveTo(px(x), py(y))));
    ctx.stroke();
    if (points.length < 40) points.forEach(([x, y]) => ctx.fillRect(px(x) - 2, py(y) - 2, 4, 4));
    ctx.fillText(name, W - R - 70, T + 12 + 13 * k);
  });
}

// -- experiments -----------------------------------------------------------------------------
const exp = {run: null, offset: 0, records: [], timer: null, reportAt: 0, job: null,
             jobOffset: 0};

function drawCurves() {
  const pick = (key, kind) => exp.records
    .filter((r) => r[key] !== undefined && r[key] !== null && (!kind || r.kind === kind))
    .map((r, i) => [r.step !== undefined ? r.step : i, r[key]]);
  drawChart($("chart-loss"), {train: pick("loss", "train"), CV: pick("loss", "cv")});
  drawChart($("chart-cv"), {"CV error": pick("cv_error")});
  drawChart($("chart-lr"), {lr: pick("lr", "train")});
  const last = exp.records[exp.records.length - 1];
  $("log-summary").textContent = last ?
    `${exp.records.length} records; last: step ${last.step}, epoch ${last.epoch}, ` +
    `${last.kind} loss ${niceNumber(last.loss)}` : "no train_log.jsonl records yet";
}

async function pollLog() {
  if (!exp.run) return;
  const run = exp.run;
  try {
    const r = await fetchJSON(`/api/runs/log?run=${encodeURIComponent(run)}` +
                              `&offset=${exp.offset}`);
    if (run !== exp.run) return;
    if (r.reset) exp.records = [];
    exp.records.push(...r.records);
    exp.offset = r.offset;
    $("log-errors").textContent = r.errors.join("\n");
    drawCurves();
  } catch (e) {
    $("log-errors").textContent = e.message;
  }
  if (Date.now() - exp.reportAt > 10000) await loadReport();
}

async function loadReport() {
  exp.reportAt = Date.now();
  const run = exp.run;
  try {
    const scores = await fetchJSON(`/api/runs/report?run=${encodeURIComponent(run)}&worst=10`);
    if (run !== exp.run) return;
    const names = Object.keys(scores);
    if (!names.length) {
      $("scores").innerHTML = "<p class='status'>no scored decode_* folders yet</p>";
      return;
    }
    const rows = names.filter((n) => scores[n].table).map((n) => {
      const t = scores[n].table;
      return `<tr><th>${escapeHtml(n)}</th><td>${t.error_rate.toFixed(2)}</td>` +
        `<td>${t.errors}</td><td>${t.num_ref}</td><td>${t.substitutions}</td>` +
        `<td>${t.deletions}</td><td>${t.insertions}</td><td>${t.num_sentences}</td>` +
        `<td>${t.sentence_error_rate.toFixed(2)}</td></tr>`;
    }).join("");
    const worst = names.map((n) => scores[n].error ?
      `<p class="error">${escapeHtml(n)}: ${escapeHtml(scores[n].error)}</p>` :
      `<details><summary>worst utterances: ${escapeHtml(n)}</summary><pre>` +
      `${escapeHtml(scores[n].worst)}</pre></details>`).join("");
    $("scores").innerHTML = `<table id="wer-table"><tr><th>set</th><th>WER %</th><th>errors` +
      `</th><th>words</th><th>sub</th><th>del</th><th>ins</th><th>sentences</th>` +
      `<th>SER %</th></tr>${rows}</table>${worst}`;
  } catch (e) {
    $("scores").innerHTML = `<p class="error">${escapeHtml(e.message)}</p>`;
  }
}

async function loadNetwork() {
  const run = exp.run;
  $("network").innerHTML = "<p class='status'>loading...</p>";
  try {
    const n = await fetchJSON(`/api/runs/network?run=${encodeURIComponent(run)}`);
    if (run !== exp.run) return;
    if (n.svg) $("network").innerHTML = n.svg.slice(n.svg.indexOf("<svg"));
    else if (n.dot) {
      $("network").innerHTML = "<p class='status'>graphviz is not installed on the server " +
        "(apt-get install graphviz): the network in dot format</p><pre>" +
        escapeHtml(n.dot) + "</pre>";
    } else $("network").innerHTML = "<p class='status'>no final.mdl in this run yet</p>";
    if (n.parameters) {
      $("network").insertAdjacentHTML("afterbegin",
        `<p class="status">${n.parameters.toLocaleString()} parameters</p>`);
    }
  } catch (e) {
    $("network").innerHTML = `<p class="error">${escapeHtml(e.message)}</p>`;
  }
}

function selectRun(run) {
  exp.run = run;
  exp.offset = 0;
  exp.records = [];
  exp.reportAt = 0;
  drawCurves();
  loadNetwork();
  pollLog();
}

async function loadRuns() {
  try {
    const r = await fetchJSON("/api/runs");
    const select = $("runs");
    const current = select.value;
    select.innerHTML = r.runs.map((x) => `<option value="${escapeHtml(x.run)}">` +
      `${escapeHtml(x.run)}${x.train_log ? "" : " (no log)"}</option>`).join("");
    setStatus("runs-status", `${r.runs.length} runs under ${r.root}`);
    if (r.runs.some((x) => x.run === current)) select.value = current;
    if (select.value && select.value !== exp.run) selectRun(select.value);
  } catch (e) {
    setStatus("runs-status", e.message, true);
  }
}

async function loadJobChoices() {
  try {
    const c = await fetchJSON("/api/configs");
    $("config").innerHTML = c.configs.map((p) => `<option>${escapeHtml(p)}</option>`).join("");
    $("train-start").disabled = !c.configs.length;
    $("stage").innerHTML = c.stages.map((s) => `<option value="${s.stage}">` +
      `${s.stage} ${escapeHtml(s.name)}</option>`).join("");
    $("stage-start").disabled = !c.stages.length;
  } catch (e) {
    setStatus("job-status", e.message, true);
  }
}

async function startJob(body) {
  try {
    const job = await fetchJSON("/api/jobs", {method: "POST", body: JSON.stringify(body),
                                              headers: {"Content-Type": "application/json"}});
    exp.job = job.id;
    exp.jobOffset = 0;
    $("job-log").textContent = "";
    $("job-stop").disabled = false;
    setStatus("job-status", `job ${job.id} running: ${job.command}`);
    setTimeout(loadRuns, 3000);
  } catch (e) {
    setStatus("job-status", e.message, true);
  }
}

async function pollJob() {
  if (exp.job === null) return;
  try {
    const r = await fetchJSON(`/api/jobs/${exp.job}/log?offset=${exp.jobOffset}`);
    const log = $("job-log");
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.textContent += r.text;
    if (atEnd) log.scrollTop = log.scrollHeight;
    exp.jobOffset = r.offset;
    if (!r.running) {
      setStatus("job-status", `job ${r.id} ended with status ${r.returncode}`,
                r.returncode !== 0);
      $("job-stop").disabled = true;
      exp.job = null;
      loadRuns();
    }
  } catch (e) {
    setStatus("job-status", e.message, true);
  }
}

// -- start -----------------------------------------------------------------------------------
function showTab(name) {
  for (const t of ["transcribe", "experiments"]) {
    $(`page-${t}`).classList.toggle("hidden", t !== name);
    $(`tab-${t}`).classList.toggle("active", t === name);
  }
}

async function start() {
  document.querySelectorAll("nav button").forEach(
    (b) => b.addEventListener("click", () => { location.hash = b.dataset.tab; }));
  $("mic-start").addEventListener("click", micStart);
  $("mic-stop").addEventListener("click", micStop);
  $("upload").addEventListener("click", uploadFile);
  $("runs").addEventListener("change", () => selectRun($("runs").value));
  $("train-start").addEventListener("click", () => startJob({
    kind: "train", config: $("config").value, out: $("train-out").value || undefined}));
  $("stage-start").addEventListener("click", () => startJob({
    kind: "stage", stage: Number($("stage").value)}));
  $("job-stop").addEventListener("click", () => exp.job !== null &&
    fetchJSON(`/api/jobs/${exp.job}/stop`, {method: "POST"}).catch(() => {}));
  try {
    const h = await fetchJSON("/health");
    $("model").textContent = `${h.model} (${h.sample_rate} Hz, ${h.workers} model threads)`;
    if (h.experiments) {
      $("tab-experiments").classList.remove("hidden");
      await loadRuns();
      await loadJobChoices();
      setInterval(pollLog, 2000);
      setInterval(loadRuns, 15000);
      setInterval(pollJob, 1500);
    }
    const follow = () => showTab(location.hash === "#experiments" && h.experiments ?
      "experiments" : "transcribe");
    window.addEventListener("hashchange", follow);
    follow();
  } catch (e) {
    $("model").textContent = `server: ${e.message}`;
  }
  document.body.dataset.ready = "1";
}

start();
