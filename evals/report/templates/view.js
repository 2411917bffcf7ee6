"use strict";
// The case list and a case's detail, built from the JSON in this page (no network). Every text from the run is set
// with textContent, never as HTML. A unit's detail is parsed only when its case is opened.
(function () {
  const S = JSON.parse(document.getElementById("hymem-summary").textContent);
  const PAGE_SIZE = 50;
  const TRUNCATE = 600;
  const units = new Map();
  const state = {arm: "", dataset: "", tag: "", lang: "", kind: "", text: "", flags: new Set(), sort: "", dir: 1,
                 page: 0, open: -1};
  const $ = (id) => document.getElementById(id);

  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  function unit(i) {
    if (!units.has(i)) units.set(i, JSON.parse($("unit-" + i).textContent));
    return units.get(i);
  }

  // ---- the case list ------------------------------------------------------------------------------------------

  const FLIP = new Set(["right_to_wrong", "wrong_to_right"]);
  const flipped = (c) => c.flips.filter((f) => FLIP.has(f.change)).length;
  function cells(c) {
    if (state.arm === "") return Object.values(c.arms);
    const cell = c.arms[state.arm];
    return cell ? [cell] : [];
  }
  const total = (c, key) => cells(c).reduce((n, cell) => n + cell[key], 0);
  const FLAGS = {
    wrong: (c) => cells(c).some((x) => x.wrong > 0),
    anomalies: (c) => cells(c).some((x) => x.anomalies > 0),
    failed: (c) => cells(c).some((x) => x.failed > 0),
    flaky: (c) => cells(c).some((x) => x.flaky.length > 0),
    infra: (c) => cells(c).some((x) => x.infra_error),
    flipped: (c) => flipped(c) > 0,
  };
  const SORTS = {
    case: (c) => c.case_id, dataset: (c) => c.dataset, lang: (c) => c.lang,
    wrong: (c) => total(c, "wrong"), anomalies: (c) => total(c, "anomalies"), failed: (c) => total(c, "failed"),
    flips: (c) => flipped(c),
  };

  function matches(c) {
    if (state.arm !== "" && !c.arms[state.arm]) return false;
    if (state.dataset && c.dataset !== state.dataset) return false;
    if (state.lang && c.lang !== state.lang) return false;
    if (state.tag && !c.tags.includes(state.tag)) return false;
    if (state.kind && !cells(c).some((x) => x.kinds.includes(state.kind))) return false;
    if (state.text && !c.case_id.toLowerCase().includes(state.text.toLowerCase())) return false;
    for (const flag of state.flags) if (!FLAGS[flag](c)) return false;
    return true;
  }

  // Default order: what a reader opens first — flipped cases, then anomalies, failed writes, wrong facts.
  function byDefault(a, b) {
    return flipped(b) - flipped(a) || total(b, "anomalies") - total(a, "anomalies") ||
      total(b, "failed") - total(a, "failed") || total(b, "wrong") - total(a, "wrong") ||
      a.dataset.localeCompare(b.dataset) || a.case_id.localeCompare(b.case_id);
  }

  function ordered(list) {
    if (!state.sort) return list.sort(byDefault);
    const key = SORTS[state.sort];
    return list.sort((a, b) => {
      const x = key(a), y = key(b);
      const d = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return state.dir * d || a.case_id.localeCompare(b.case_id);
    });
  }

  function options(id, values) {
    const select = $(id);
    for (const v of values) select.append(h("option", {value: v}, v));
  }

  function head() {
    const row = $("case-head");
    row.replaceChildren();
    const col = (label, key, title) => {
      const th = h("th", {title: title || null}, label);
      if (key) {
        th.classList.add("sortable");
        th.dataset.sort = key;
        if (state.sort === key) { th.classList.add("sorted"); th.dataset.dir = state.dir > 0 ? " ▲" : " ▼"; }
        th.addEventListener("click", () => {
          state.dir = state.sort === key ? -state.dir : (key === "case" || key === "dataset" || key === "lang" ? 1 : -1);
          state.sort = key;
          state.page = 0;
          draw();
        });
      }
      row.append(th);
    };
    col("case", "case"); col("dataset", "dataset"); col("lang", "lang"); col("tags");
    col("wrong facts", "wrong", "stored facts not right (missed, extra, wrong subject or owner), per epoch; summed over the providers shown");
    col("anomalies", "anomalies", "counted anomalies, per epoch");
    col("failed writes", "failed", "fault-free writes that failed (natural failures), per epoch");
    S.arms.forEach((label, i) => { if (showArm(i)) col(label); });
    if (S.compare) col("flips", "flips", "metrics that flipped between fully right and not, as compare finds them");
  }

  // A column per provider when there are several (the totals already say it all for one).
  const showArm = (i) => S.arms.length > 1 && (state.arm === "" || state.arm === String(i));

  function armCell(cell) {
    if (!cell) return h("td", {class: "hint"}, "not run");
    const parts = [];
    parts.push(h("span", {class: "pill " + (cell.wrong > 0 ? "bad" : "good")},
      cell.gold ? `${cell.wrong} wrong · ${cell.gold} gold` : `${cell.wrong} wrong`));
    if (cell.anomalies) parts.push(h("span", {class: "pill bad"}, `${cell.anomalies} anomalies`));
    if (cell.failed) parts.push(h("span", {class: "pill bad"}, `${cell.failed} failed writes`));
    if (cell.flaky.length) parts.push(h("span", {class: "pill warn", title: cell.flaky.join(", ")}, "flaky"));
    if (cell.infra_error) parts.push(h("span", {class: "pill warn"}, "infra error"));
    return h("td", {}, parts);
  }

  // The flipped metrics of a case, short: per direction a count and the first plain metrics (their `_with_errors`,
  // `proposed_` and confusion twins are in the tooltip and the case's detail).
  const plainMetric = (m) => m && !m.endsWith("_with_errors") && !m.startsWith("proposed_") && !m.includes("confusion");
  function flipCell(c) {
    const rows = c.flips.filter((f) => FLIP.has(f.change));
    if (!rows.length) return h("td", {}, c.flips.length ? h("span", {class: "hint"}, [...new Set(c.flips.map((f) => f.change))].join(", ")) : "");
    return h("td", {title: rows.map((f) => `${f.a} → ${f.b} ${f.metric}: ${f.change}`).join("\n")},
      ["right_to_wrong", "wrong_to_right"].map((change) => {
        const mine = rows.filter((f) => f.change === change);
        if (!mine.length) return null;
        const names = [...new Set(mine.map((f) => f.metric).filter(plainMetric))];
        return h("div", {class: change === "right_to_wrong" ? "bad" : "good"},
          `${mine.length} ${change === "right_to_wrong" ? "right → wrong" : "wrong → right"}`,
          h("span", {class: "hint"}, names.length ? ": " + names.slice(0, 3).join(", ") + (names.length > 3 ? ", …" : "") : ""));
      }));
  }

  function draw() {
    head();
    const shown = ordered(S.cases.map((c, i) => Object.assign(c, {index: i})).filter(matches));
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages - 1);
    const page = shown.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE);
    $("case-count").textContent = `${shown.length} of ${S.cases.length} cases`;
    $("page-of").textContent = `page ${state.page + 1} of ${pages}`;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
    const body = $("case-rows");
    body.replaceChildren(...page.map((c) => {
      const tr = h("tr", {class: c.index === state.open ? "open" : null, "data-case": c.case_id,
                          "data-dataset": c.dataset, onclick: () => openCase(c.index)},
        h("td", {}, h("code", {}, c.case_id),
          cells(c).some((x) => x.flaky.length) ? [" ", h("span", {class: "pill warn"}, "flaky")] : null,
          cells(c).some((x) => x.infra_error) ? [" ", h("span", {class: "pill warn"}, "infra error")] : null),
        h("td", {}, c.dataset), h("td", {}, c.lang),
        h("td", {}, c.tags.map((t) => h("span", {class: "tag"}, t))),
        h("td", {}, String(round(total(c, "wrong")))), h("td", {class: total(c, "anomalies") ? "bad" : ""}, String(round(total(c, "anomalies")))),
        h("td", {class: total(c, "failed") ? "bad" : ""}, String(round(total(c, "failed")))));
      S.arms.forEach((_, i) => { if (showArm(i)) tr.append(armCell(c.arms[String(i)])); });
      if (S.compare) tr.append(flipCell(c));
      return tr;
    }));
  }

  const round = (x) => Math.round(x * 100) / 100;

  // ---- one case ------------------------------------------------------------------------------------------------

  function openCase(index, scroll = true) {
    state.open = index;
    const c = S.cases[index];
    const key = `${c.dataset}/${c.case_id}`;
    if (decodeURIComponent(location.hash.slice(6)) !== key) history.replaceState(null, "", "#case=" + encodeURIComponent(key));
    const detail = $("detail");
    const armIds = Object.keys(c.arms);
    const grid = h("div", {class: "arms", style: `--arms: ${armIds.length}`});
    for (const a of armIds) grid.append(armColumn(S.arms[Number(a)], c.arms[a]));
    detail.replaceChildren(
      h("h2", {}, "Case ", h("code", {id: "detail-case"}, c.case_id), ` · ${c.dataset} · ${c.lang} `,
        c.tags.map((t) => h("span", {class: "tag"}, t))),
      ...(c.flips.length ? [flipList(c)] : []), grid);
    detail.hidden = false;
    for (const tr of $("case-rows").children) tr.classList.toggle("open", tr.dataset.case === c.case_id && tr.dataset.dataset === c.dataset);
    if (scroll) detail.scrollIntoView({block: "start"});
  }

  function flipList(c) {
    return h("div", {class: "box flips"}, h("h4", {}, "Changes between providers or runs"),
      h("ul", {}, c.flips.map((f) => h("li", {class: f.change === "right_to_wrong" ? "bad" : f.change === "wrong_to_right" ? "good" : ""},
        `${f.metric || "(case)"}: ${f.change.replaceAll("_", " ")} — ${f.a}: ${fmt(f.a_value)}, ${f.b}: ${fmt(f.b_value)}`))));
  }

  const fmt = (x) => (x === null || x === undefined ? "n/a" : typeof x === "number" ? String(round(x)) : String(x));

  function armColumn(label, cell) {
    const col = h("div", {class: "arm"});
    const body = h("div", {});
    const show = (i) => {
      body.replaceChildren(unitView(unit(cell.units[i])));
      for (const b of col.querySelectorAll(".epochs button")) b.classList.toggle("on", Number(b.dataset.i) === i);
    };
    col.append(h("h3", {}, label));
    if (cell.units.length > 1) {
      col.append(h("div", {class: "epochs"}, "epoch ", cell.units.map((u, i) =>
        h("button", {type: "button", "data-i": String(i), onclick: () => show(i)}, String(unit(u).epoch)))));
    }
    col.append(body);
    show(0);
    return col;
  }

  function table(header, rows, attrs) {
    return h("table", attrs || {}, h("thead", {}, h("tr", {}, header.map((x) => h("th", {}, x)))), h("tbody", {}, rows));
  }

  function longText(text, cls) {
    text = text || "";
    if (text.length <= TRUNCATE) return h("pre", {class: cls || null}, text);
    const pre = h("pre", {class: cls || null}, text.slice(0, TRUNCATE) + "…");
    const button = h("button", {type: "button", class: "expand"}, `show all ${text.length} characters`);
    button.addEventListener("click", () => {
      const full = pre.textContent.length > TRUNCATE + 1;
      pre.textContent = full ? text.slice(0, TRUNCATE) + "…" : text;
      button.textContent = full ? `show all ${text.length} characters` : "show less";
    });
    return h("div", {}, pre, button);
  }

  const codes = (c) => Object.entries(c || {}).map(([k, v]) => `${k}=${v}`).join(" ");

  function unitView(u) {
    const out = h("div", {class: "unit"});
    out.append(h("p", {class: "hint"}, `epoch ${u.epoch} · ${u.system} · status `,
      h("span", {class: u.status === "ok" ? "good" : "bad"}, u.status), ` · ${u.n_writes} writes · ${round(u.seconds)} s`));
    if (u.error) out.append(h("div", {class: "box failed"}, h("h4", {}, "Infra error"), longText(u.error)));
    if (u.failed_writes.length) {
      out.append(h("div", {class: "box failed failed-writes"}, h("h4", {}, `Failed writes (${u.failed_writes.length})`),
        h("p", {class: "hint"}, "fault-free writes that failed on the model's own reply or the engine's doing"),
        table(["write", "path", "cause", "codes", "why", "write contract"], u.failed_writes.map((w) =>
          h("tr", {}, h("td", {}, `write ${w.write}`), h("td", {}, w.path), h("td", {}, w.cause),
            h("td", {}, h("code", {}, codes(w.codes))), h("td", {}, longText(w.message)),
            h("td", {class: w.contract === "held" ? "good" : "bad"}, w.contract))))));
    }
    if (u.anomalies.length) {
      out.append(h("div", {class: "box failed anomalies"}, h("h4", {}, `Anomalies (${u.anomalies.length})`),
        h("ul", {class: "anomalies"}, u.anomalies.map((a) => h("li", {},
          h("strong", {class: "bad"}, a.kind), ` · ${a.where}`, h("div", {class: "witness"}, a.witness))))));
    }
    if (u.record === false) {
      out.append(h("p", {class: "box note-tables"}, "This run directory keeps no units.jsonl (a committed baseline): its " +
        "facts, ops, faulted runs and anomalies come from its tables; the conversation, the model calls, the memories " +
        "and the failed writes are not in them."));
      out.append(factsBox(u));
      if (u.ops.length) out.append(h("div", {class: "box"}, h("h4", {}, "Ops proposed by reconcile and applied by the engine"), opsTable(u.ops, true)));
    } else {
      out.append(factsBox(u), memoriesBox(u), writesBox(u));
    }
    if (u.faults.length) out.append(faultsBox(u));
    if (u.attempts.length) {
      out.append(h("details", {class: "box"}, h("summary", {}, "Model and embedding attempts"),
        table(["run", "site", "status", "attempts", "retries", "cache hits", "injected", "tokens", "seconds"],
          u.attempts.map((a) => h("tr", {}, [a.unit, a.site, a.status, a.attempts, a.retries, a.cache_hits, a.injected,
            a.tokens, round(a.seconds)].map((x) => h("td", {}, String(x))))))));
    }
    return out;
  }

  function factsBox(u) {
    const box = h("div", {class: "box facts-box"});
    const stages = Object.keys(u.facts);
    const body = h("div", {});
    const show = (stage) => {
      const rows = u.facts[stage] || [];
      body.replaceChildren(rows.length ? table(["", "gold fact", "gold subject", "gold owner", "stored fact", "subject", "owner", "score"],
        rows.map((f) => h("tr", {class: "fact " + f.verdict},
          h("td", {class: "verdict-" + f.verdict, title: f.note || null}, f.verdict), h("td", {}, f.gold || ""),
          h("td", {}, f.gold_subject || ""), h("td", {}, f.gold_owner || ""), h("td", {}, f.pred || ""),
          h("td", {class: f.subject_ok === false ? "subject-wrong" : null}, f.pred_subject || ""),
          h("td", {class: f.owner_ok === false ? "owner-wrong" : null}, f.pred_owner || ""),
          h("td", {}, f.score === null ? "" : f.score.toFixed(2)))), {class: "facts", "data-stage": stage})
        : h("p", {class: "hint"}, "no gold and no fact at this stage"));
      for (const b of box.querySelectorAll(".stage")) b.classList.toggle("on", b.dataset.stage === stage);
    };
    box.append(h("h4", {}, "Gold facts beside what was ",
      stages.length ? stages.map((s) => h("button", {type: "button", class: "stage", "data-stage": s, onclick: () => show(s)}, s)) : "stored"));
    box.append(body);
    if (stages.length) show(stages.includes("stored") ? "stored" : stages[0]);
    else body.append(h("p", {class: "hint"}, "facts.parquet has no rows for this unit"));
    return box;
  }

  function memoriesBox(u) {
    const box = h("details", {class: "box"}, h("summary", {}, `Live memories after the run (${u.memories.length}) and profile`));
    box.append(table(["id", "text", "subject", "owner", "kind"], u.memories.map((m) =>
      h("tr", {}, [m.id, m.text, m.subject, m.owner, m.kind].map((x) => h("td", {}, x === null || x === undefined ? "" : String(x)))))));
    if (u.profile) box.append(h("pre", {}, JSON.stringify(u.profile, null, 1)));
    return box;
  }

  function speaker(m) {
    const role = m.role || "user";
    if (role === "user") return {label: "[user]" + (m.name ? ` (${m.name})` : ""), cls: "user"};
    if (role === "assistant") return m.name ? {label: `[${m.name}]`, cls: "named"} : {label: "[assistant]", cls: "assistant"};
    return {label: `[${role}]` + (m.name ? ` (${m.name})` : ""), cls: role === "tool" || role === "function" ? "tool" : "system"};
  }

  function contentText(content) {
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.map((p) => (typeof p === "string" ? p : p.text || JSON.stringify(p))).join("\n");
    return content === null || content === undefined ? "" : JSON.stringify(content);
  }

  function writesBox(u) {
    const box = h("div", {class: "box writes"}, h("h4", {}, "Conversation, ops and model calls, write by write"));
    for (const w of u.writes) {
      const el = h("div", {class: "write" + (w.success ? "" : " failed"), "data-write": String(w.index)});
      el.append(h("div", {}, h("strong", {}, `write ${w.index}`), ` · ${w.path} · `,
        w.success ? h("span", {class: "good"}, "ok") : h("span", {class: "bad"}, "FAILED " + codes(w.codes)),
        h("span", {class: "hint"}, ` · ${w.request_id}`)));
      if (!w.success && w.message) el.append(h("div", {class: "bad"}, w.message));
      if (w.path === "extracted") {
        el.append(h("ul", {}, w.payload.map((m) => h("li", {}, m.text || JSON.stringify(m), h("span", {class: "hint"}, ` (subject ${m.subject || "—"}, owner ${m.owner || "—"})`)))));
      } else {
        for (const m of w.payload) {
          const s = speaker(m);
          el.append(h("div", {class: "msg " + s.cls}, h("span", {class: "speaker"}, s.label), contentText(m.content)));
        }
      }
      if (!w.payload.length) el.append(h("p", {class: "hint"}, "the messages of this write are not in the record (a run from before they were kept)"));
      if (w.proposed_facts.length) {
        el.append(h("div", {class: "hint"}, "extracted:"), table(["fact", "subject", "owner"], w.proposed_facts.map((f) =>
          h("tr", {}, h("td", {}, f.text || ""), h("td", {}, f.subject || ""), h("td", {}, f.owner || "")))));
      }
      if (w.ops.length) el.append(h("div", {class: "hint"}, "ops proposed by reconcile and applied by the engine:"), opsTable(w.ops, false));
      for (const call of w.calls) {
        el.append(h("details", {class: "call"}, h("summary", {}, `model call ${call.site}: prompt ${(call.text || "").length} chars, reply ${(call.reply || "").length} chars`),
          h("div", {class: "hint"}, "prompt (the call's last user message)"), longText(call.text),
          h("div", {class: "hint"}, "reply"), longText(call.reply || "(no reply)")));
      }
      box.append(el);
    }
    return box;
  }

  function opsTable(ops, withWrite) {
    const head = ["", "op", "fact", "subject", "target", "target subject", "cross-subject", "refused"];
    return table(withWrite ? ["write", ...head] : head, ops.map((o) =>
      h("tr", {class: o.source}, withWrite ? h("td", {}, String(o.write)) : null, h("td", {}, o.source), h("td", {}, o.op || ""),
        h("td", {}, o.fact_text || ""), h("td", {}, o.fact_subject || ""),
        h("td", {}, o.target_id === null || o.target_id === undefined ? "" : `#${o.target_id} ${o.target_text || ""}`),
        h("td", {}, o.target_subject || ""),
        h("td", {class: o.cross_subject ? "bad" : ""}, o.cross_subject === null || o.cross_subject === undefined ? "" : o.cross_subject ? "yes" : "no"),
        h("td", {}, o.refused || ""))));
  }

  function faultsBox(u) {
    const outcomes = {};
    for (const f of u.faults) outcomes[f.outcome] = (outcomes[f.outcome] || 0) + 1;
    const sorted = [...u.faults].sort((a, b) => b.anomalies.length - a.anomalies.length);
    const box = h("details", {class: "box faults", open: u.faults.some((f) => f.anomalies.length && f.outcome === "wrong")},
      h("summary", {}, `Faulted runs (${u.faults.length}): ` + Object.entries(outcomes).map(([k, n]) => `${n} ${k}`).join(", ")));
    box.append(table(["write", "site × kind", "outcome", "expected", "actual", "retry", "anomalies and witnesses"], sorted.map((f) =>
      h("tr", {class: f.outcome},
        h("td", {}, String(f.write)), h("td", {}, `${f.site} × ${f.kind}` + (f.occurrence ? ` #${f.occurrence}` : ""),
          Object.keys(f.injected || {}).length ? h("div", {class: "hint"}, "injected: " + JSON.stringify(f.injected)) : null),
        h("td", {class: f.outcome === "wrong" ? "bad" : f.outcome === "ok" ? "good" : "warn"}, f.outcome + (f.fired ? "" : " (not fired)")),
        h("td", {}, h("code", {}, codes(f.expected))), h("td", {}, h("code", {}, codes(f.actual))),
        h("td", {}, f.retry_success === null ? "" : f.retry_success ? "ok" : "failed"),
        h("td", {}, f.anomalies.map((a) => h("div", {}, h("strong", {class: "bad"}, a.kind), h("div", {class: "witness"}, a.witness))))))));
    return box;
  }

  // ---- wiring --------------------------------------------------------------------------------------------------

  function init() {
    const uniq = (xs) => [...new Set(xs)].sort();
    options("f-dataset", uniq(S.cases.map((c) => c.dataset)));
    options("f-tag", uniq(S.cases.flatMap((c) => c.tags)));
    options("f-lang", uniq(S.cases.map((c) => c.lang)));
    options("f-kind", S.kinds);
    const bind = (id, key) => $(id).addEventListener(id === "f-text" ? "input" : "change", (e) => {
      state[key] = e.target.value; state.page = 0; draw();
    });
    bind("f-arm", "arm"); bind("f-dataset", "dataset"); bind("f-tag", "tag"); bind("f-lang", "lang");
    bind("f-kind", "kind"); bind("f-text", "text");
    for (const box of document.querySelectorAll("input.flag")) {
      box.addEventListener("change", () => { box.checked ? state.flags.add(box.value) : state.flags.delete(box.value); state.page = 0; draw(); });
    }
    for (const b of document.querySelectorAll("button.kind-filter")) {
      b.addEventListener("click", () => { $("f-kind").value = b.dataset.kind; state.kind = b.dataset.kind; state.page = 0; draw(); $("cases").scrollIntoView(); });
    }
    $("prev").addEventListener("click", () => { state.page -= 1; draw(); });
    $("next").addEventListener("click", () => { state.page += 1; draw(); });
    draw();
    fromHash();
    window.addEventListener("hashchange", fromHash);
    performance.mark("hymem-cases-drawn");
  }

  function fromHash() {
    if (!location.hash.startsWith("#case=")) return;
    const key = decodeURIComponent(location.hash.slice(6));
    const index = S.cases.findIndex((c) => `${c.dataset}/${c.case_id}` === key);
    if (index >= 0 && index !== state.open) openCase(index);
  }

  init();
})();
