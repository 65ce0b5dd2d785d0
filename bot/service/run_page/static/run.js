// The run page's script: the lines a long log's first view left out, the live log, the first
// error scrolled to. Every text from a run goes into the page as text (textContent), and class
// names only from the fixed set the server's parser makes: a log line can never become markup.
"use strict";

(function () {
  const CLASS_NAMES = /^((b|d|i|u|fg\d{1,2}|bg\d{1,2})( (?!$)|$))*$/;
  const body = document.body;
  const runId = body.dataset.run;

  function lineElement(step, line) {
    const row = document.createElement("div");
    row.className = "line";
    row.id = "s" + step + "-L" + line.n;
    const number = document.createElement("a");
    number.className = "ln";
    number.href = "#" + row.id;
    number.textContent = String(line.n);
    row.appendChild(number);
    const text = document.createElement("span");
    text.className = "t";
    if (line.g !== null && line.g !== undefined) {
      row.className = "line grp";
      row.dataset.group = line.g;
      text.textContent = "\u25b8 " + line.g;
    } else if (line.eg) {
      row.className = "line egrp";
    } else {
      for (const [classes, content] of line.s) {
        if (classes && CLASS_NAMES.test(classes)) {
          const span = document.createElement("span");
          span.className = classes;
          span.textContent = content;
          text.appendChild(span);
        } else {
          text.appendChild(document.createTextNode(content));
        }
      }
    }
    row.appendChild(text);
    return row;
  }

  function logOf(step) {
    return document.querySelector('.log[data-step="' + Number(step) + '"]');
  }

  // The lines between a long log's head and tail, fetched when asked for.
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.more");
    if (!button) return;
    button.disabled = true;
    const { step, from, to } = button.dataset;
    const url = "/runs/" + encodeURIComponent(runId) + "/steps/" + Number(step) + "/lines?from=" + Number(from) + "&to=" + Number(to);
    const answer = await fetch(url, { credentials: "same-origin" });
    if (!answer.ok) { button.disabled = false; return; }
    const data = await answer.json();
    const fragment = document.createDocumentFragment();
    for (const line of data.lines) fragment.appendChild(lineElement(Number(step), line));
    const last = data.lines.length ? data.lines[data.lines.length - 1].n : Number(to);
    if (last < Number(to)) {
      button.dataset.from = String(last + 1);
      button.textContent = "show lines " + (last + 1) + "\u2013" + to;
      button.disabled = false;
      button.before(fragment);
    } else {
      button.replaceWith(fragment);
    }
  });

  function highlight(step, number) {
    const row = document.getElementById("s" + Number(step) + "-L" + Number(number));
    if (!row) return;
    row.classList.add("hl");
    row.scrollIntoView({ block: "center" });
  }

  // Collapsible groups (::group:: … ::endgroup::): folded, unless the marked error line is inside.
  function groupLines(start) {
    const lines = [];
    let depth = 0;
    for (let node = start.nextElementSibling; node; node = node.nextElementSibling) {
      if (!node.classList.contains("line")) continue;
      if (node.classList.contains("grp")) depth += 1;
      else if (node.classList.contains("egrp")) { if (depth === 0) break; depth -= 1; }
      lines.push(node);
    }
    return lines;
  }

  function fold(start, folded) {
    start.classList.toggle("folded", folded);
    for (const line of groupLines(start)) line.hidden = folded;
  }

  document.addEventListener("click", (event) => {
    const start = event.target.closest(".line.grp");
    if (!start || event.target.closest("a")) return;
    fold(start, !start.classList.contains("folded"));
  });

  function foldGroups() {
    for (const start of document.querySelectorAll(".line.grp")) {
      if (!groupLines(start).some((line) => line.classList.contains("hl"))) fold(start, true);
    }
  }

  function firstHighlight() {
    if (location.hash) return;
    const row = document.querySelector(".line.hl");
    if (row) row.scrollIntoView({ block: "center" });
  }

  function stepSection(data) {
    const details = document.createElement("details");
    details.className = "step state-running";
    details.id = "step-" + Number(data.step);
    details.dataset.step = String(Number(data.step));
    details.open = true;
    const summary = document.createElement("summary");
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = data.name;
    const state = document.createElement("span");
    state.className = "state";
    state.textContent = "running";
    const duration = document.createElement("span");
    duration.className = "dur";
    summary.append(name, " ", state, " ", duration);
    const log = document.createElement("div");
    log.className = "log";
    log.dataset.step = String(Number(data.step));
    details.append(summary, log);
    document.getElementById("logs").appendChild(details);
    const row = document.createElement("tr");
    row.id = "row-" + Number(data.step);
    const link = document.createElement("a");
    link.href = "#" + details.id;
    link.textContent = data.name;
    const cells = [link, "running", new Date(data.at).toLocaleTimeString(), "running"].map((content) => {
      const cell = document.createElement("td");
      cell.append(content);
      return cell;
    });
    cells[1].className = "state state-running";
    row.append(...cells);
    document.querySelector("#step-table tbody").appendChild(row);
  }

  function appendLines(data) {
    const log = logOf(data.step);
    if (!log) return;
    const follow = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    const fragment = document.createDocumentFragment();
    for (const line of data.lines) fragment.appendChild(lineElement(data.step, line));
    log.appendChild(fragment);
    if (follow && !location.hash) log.lastElementChild.scrollIntoView({ block: "end" });
  }

  function endStep(data) {
    const section = document.getElementById("step-" + Number(data.step));
    const seconds = Number(data.duration_s).toFixed(1) + " s";
    if (section) {
      section.className = "step state-" + data.state.replace(/[^a-z-]/g, "");
      section.querySelector("summary .state").textContent = data.state;
      section.querySelector("summary .dur").textContent = seconds;
      if (data.state === "passed") section.open = false;
    }
    const row = document.getElementById("row-" + Number(data.step));
    if (row) {
      row.children[1].textContent = data.state;
      row.children[1].className = "state state-" + data.state.replace(/[^a-z-]/g, "");
      row.children[3].textContent = seconds;
    }
    if (data.error_line !== null && data.error_line !== undefined) highlight(data.step, data.error_line);
  }

  function note(step, text) {
    const log = logOf(step);
    if (!log) return;
    const line = document.createElement("div");
    line.className = "note cut";
    line.textContent = "\u2026 " + text + " \u2026";
    log.appendChild(line);
  }

  function cutNote(data) {
    note(data.step, data.text + " (the log keeps each step's head and tail)");
  }

  function heldNote(data) {
    note(data.step, "this step printed more than its log's head keeps: " + data.text);
  }

  function live() {
    const url = "/runs/" + encodeURIComponent(runId) + "/events?after=" + Number(body.dataset.lastSeq);
    const source = new EventSource(url);
    const on = (name, handler) => source.addEventListener(name, (event) => handler(JSON.parse(event.data)));
    on("step", stepSection);
    on("lines", appendLines);
    on("end", endStep);
    on("cut", cutNote);
    on("note", heldNote);
    on("run", () => { source.close(); location.reload(); });
  }

  foldGroups();
  firstHighlight();
  if (body.dataset.live === "1") live();
})();
