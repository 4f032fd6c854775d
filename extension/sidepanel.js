// The side panel: this window's running task (trace, elapsed time, Stop), its questions, recent tasks.
"use strict";
setupCommon();

const ACTIVE = ["pending", "input-required"];
// The running task's box is built once per task and then updated in place: a refresh every second never
// replaces the Stop button or the answer form under the user's pointer or cursor.
let running = null;       // {requestId, status, elapsed, trace, question, stop} of the task on screen

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "onclick") node.addEventListener("click", v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function elapsed(since) {
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(since)) / 1000));
  return seconds < 60 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

function traceOf(task) {
  return (task.progress && task.progress.actionTrace) || (task.response && task.response.actionTrace) || [];
}

function buildRunning(task) {
  const view = {
    requestId: task.requestId,
    status: el("span", {id: "running-status"}),
    elapsed: el("span", {class: "muted", id: "elapsed"}),
    trace: el("ol", {class: "trace", id: "trace"}),
    questionSlot: el("div"),
    question: null,       // the inputId whose answer form is shown
    stop: el("button", {class: "danger", type: "button", id: "stop", text: "Stop", onclick: async () => {
      await background({type: "api", method: "POST", path: `/remote-dispatch/responses/${task.requestId}/cancel`})
        .catch((e) => alert(e.message));
      refresh();
    }}),
  };
  document.getElementById("running").replaceChildren(
    el("div", {class: "prompt", text: task.prompt}),
    el("div", {class: "row"}, view.status, view.elapsed),
    view.trace, view.questionSlot, el("p", {}, view.stop));
  return view;
}

function answerForm(task) {
  const metadata = task.hitlInputMetadata;
  const question = (metadata.action && metadata.action.question) ||
    (task.response && task.response.output && task.response.output.content) || "The task needs your input.";
  const input = el("input", {type: "text", id: "answer", placeholder: "Your answer"});
  const send = el("button", {class: "primary", type: "button", id: "send-answer", text: "Send",
    onclick: async () => {
      send.disabled = true;
      try {
        await background({type: "api", method: "POST", path: `/remote-dispatch/responses/${task.requestId}/input`,
          body: {inputId: metadata.inputId, answer: input.value}});
      } catch (e) { send.disabled = false; alert(e.message); }
      refresh();
    }});
  return el("div", {class: "card", id: "input-required"}, el("label", {for: "answer", text: question}), input,
    el("p", {}, send));
}

function renderRunning(task) {
  if (!task) {
    running = null;
    document.getElementById("running").replaceChildren(
      el("span", {class: "muted", text: "No task is running in this window."}));
    return;
  }
  if (!running || running.requestId !== task.requestId) running = buildRunning(task);
  running.status.className = `status-${task.status}`;
  running.status.textContent = task.status;
  running.elapsed.textContent = `elapsed ${elapsed(task.createdAt)}`;
  const actions = traceOf(task).map((entry) => entry.action);
  if (running.trace.dataset.actions !== JSON.stringify(actions)) {
    running.trace.dataset.actions = JSON.stringify(actions);
    running.trace.replaceChildren(...actions.map((action) => el("li", {text: action})));
  }
  const inputId = task.status === "input-required" && task.hitlInputMetadata
    ? task.hitlInputMetadata.inputId || "question" : null;
  if (running.question !== inputId) {   // a new question gets a new form; an answered one goes away
    running.question = inputId;
    running.questionSlot.replaceChildren(...(inputId ? [answerForm(task)] : []));
  }
}

function renderRecent(tasks) {
  const list = document.getElementById("recent");
  const done = tasks.filter((t) => !ACTIVE.includes(t.status));
  if (!done.length) { list.replaceChildren(el("li", {class: "muted", text: "None yet."})); return; }
  list.replaceChildren(...done.map((t) => el("li", {"data-request-id": t.requestId},
    el("div", {class: "row"},
      el("span", {class: "prompt", text: t.prompt.replace(/\s+/g, " ").slice(0, 90)}),
      el("span", {class: `status-${t.status}`, text: t.status})),
    el("div", {class: "result", text: `${((t.response && t.response.text) || "").slice(0, 160)}` +
      (t.completedAt ? ` · ${new Date(t.completedAt).toLocaleTimeString()}` : "")}))));
}

async function renderQuestions(browserWindowId) {
  const {questions = {}, messages = {}} = await chrome.storage.session.get(["questions", "messages"]);
  const section = document.getElementById("questions");
  const mine = questions[browserWindowId] || [];
  if (section.dataset.ids === mine.map((q) => q.commandId).join(",")) {
    // unchanged: keep what the user typed
  } else {
    section.dataset.ids = mine.map((q) => q.commandId).join(",");
    section.replaceChildren(...mine.map(questionCard));
  }
  const notes = messages[browserWindowId] || [];
  document.getElementById("messages-section").hidden = !notes.length;
  document.getElementById("messages").replaceChildren(...notes.map((m) => el("div", {class: "card", text: m.text})));
}

function questionCard(q) {
  const answer = (value) => background({type: "answer", commandId: q.commandId, answer: value});
  const card = el("div", {class: "card question", "data-command-id": q.commandId});
  card.append(el("h2", {text: "The automation asks"}), el("p", {text: q.args.prompt_message || "Your input is needed."}));
  if (q.name === "user_approval") {
    card.append(el("div", {class: "row"},
      el("button", {class: "primary approve", type: "button", text: q.args.approve_label || "Approve",
        onclick: () => answer({approved: true})}),
      el("button", {class: "reject", type: "button", text: q.args.reject_label || "Reject",
        onclick: () => answer({approved: false})})));
  } else if (q.name === "prompt_for_user_file") {
    const input = el("input", {type: "file", name: q.args.variable_name || "file"});
    card.append(el("label", {text: q.args.variable_name || "File"}, input), el("div", {class: "row"},
      el("button", {class: "primary submit", type: "button", text: "Send file", onclick: async () => {
        const chosen = input.files[0];
        if (!chosen) return;
        const data = await new Promise((resolve) => {
          const reader = new FileReader();
          reader.onload = () => resolve(String(reader.result));
          reader.readAsDataURL(chosen);
        });
        answer({file: {source: "inMemoryFile", filename: chosen.name, mimeType: chosen.type || "application/octet-stream",
          base64: data.slice(data.indexOf(",") + 1)}});
      }}),
      el("button", {class: "cancel", type: "button", text: "Dismiss", onclick: () => answer({aborted: true})})));
  } else {
    const fields = (q.args.variables || []).map((v) => {
      const input = v.type === "boolean" ? el("input", {type: "checkbox", name: v.name})
        : el("input", {type: v.type === "number" ? "number" : "text", name: v.name});
      return [v, input, el("label", {text: `${v.name}${v.required ? " *" : ""}`}, input)];
    });
    card.append(...fields.map((f) => f[2]));
    card.append(el("div", {class: "row"},
      el("button", {class: "primary submit", type: "button", text: "Submit", onclick: () => {
        const values = {};
        for (const [v, input] of fields) {
          values[v.name] = v.type === "boolean" ? input.checked : v.type === "number" ? Number(input.value) : input.value;
        }
        answer({values});
      }}),
      el("button", {class: "cancel", type: "button", text: "Dismiss", onclick: () => answer({aborted: true})})));
  }
  return card;
}

async function refresh() {
  const id = await thisBrowserWindowId();
  if (!id) return;
  renderQuestions(id);
  try {
    const {tasks} = await background({type: "api", method: "GET", path: `/browser-windows/${id}/tasks`});
    renderRunning(tasks.find((t) => ACTIVE.includes(t.status)) || null);
    renderRecent(tasks);
  } catch (e) {
    /* the connection state above says why */
  }
}

chrome.storage.onChanged.addListener((changes, area) => {
  if (area === "session" && (changes.questions || changes.messages)) refresh();
});
refresh();
setInterval(refresh, 1000);
