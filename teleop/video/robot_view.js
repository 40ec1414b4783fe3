// 3D robot view of the operator's web viewer (served at /robot_view.js by teleop/video/web.py).
//
// Polls GET /robot-pose (teleop/video/robot_view.py builds it: stick-figure skeletons of
// the "ghost", "actual" and "predicted" poses, in metres in the stance frame: x forward,
// y left, z up) and draws them on <canvas id="robot-view"> with a small perspective
// projection on a 2D canvas: no WebGL, no library, nothing fetched from the network.
// Mouse: drag to orbit, wheel to zoom, double-click to reset the view.
"use strict";

(function () {
  const POLL_MS = Number(document.currentScript?.dataset.pollMs || 100);
  // A poll gives up after this; without a good poll for STALE_MS the poses are dropped
  // (drawing the last ones would show a robot that may have moved since).
  const REQUEST_TIMEOUT_MS = 2000;
  const STALE_MS = 1000;
  const LEGEND_ORDER = ["ghost", "predicted", "actual"];
  // Canvas background: one exact colour, so tests can find the view in a screenshot.
  const BACKGROUND = "rgb(10, 14, 30)";
  // Drawing order = order here: the translucent ghost last, on top of the robot.
  const STYLES = {
    actual: {color: "#ff9f1c", alpha: 1.0, width: 5, dash: [], joints: 3.5},
    predicted: {color: "#b07cff", alpha: 1.0, width: 3.5, dash: [10, 7], joints: 0},
    ghost: {color: "#3ad6f5", alpha: 0.45, width: 10, dash: [], joints: 0},
  };
  // Front-left of the robot (it faces +x), slightly from above, whole body in view.
  const HOME_VIEW = {azimuth: 0.85, elevation: 0.22, distance: 1.75, target: [0.05, 0.0, 0.48]};
  const FOV = 40 * Math.PI / 180;

  const view = {...HOME_VIEW, target: HOME_VIEW.target.slice()};
  let documentData = null;   // last /robot-pose document
  let statusText = "";       // message drawn when there is nothing to draw
  let labels = null;         // legend text per pose of the last document (a view may omit a pose)
  let lastGoodPollMs = performance.now();

  // ------------------------------------------------------------------ camera
  function sub(a, b) { return [a[0] - b[0], a[1] - b[1], a[2] - b[2]]; }
  function dot(a, b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
  function cross(a, b) {
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
  }
  function normalize(a) { const n = Math.hypot(a[0], a[1], a[2]) || 1; return [a[0] / n, a[1] / n, a[2] / n]; }

  // Orbit camera around view.target for a view of size.width x size.height CSS pixels;
  // returns project(p) -> [u, v, depth] (pixels, pixels, metres) or null if behind it.
  function makeCamera(size) {
    const ce = Math.cos(view.elevation), t = view.target;
    const eye = [t[0] + view.distance * ce * Math.cos(view.azimuth),
                 t[1] + view.distance * ce * Math.sin(view.azimuth),
                 t[2] + view.distance * Math.sin(view.elevation)];
    const forward = normalize(sub(t, eye));
    const right = normalize(cross(forward, [0, 0, 1]));  // never degenerate: |elevation| < 90°
    const up = cross(right, forward);
    const focal = 0.5 * size.height / Math.tan(FOV / 2);  // [px]
    const cx = size.width / 2, cy = size.height / 2;
    return function project(p) {
      const d = sub(p, eye);
      const depth = dot(d, forward);
      if (depth < 0.05) return null;  // behind (or at) the camera: not drawable
      return [cx + focal * dot(d, right) / depth, cy - focal * dot(d, up) / depth, depth];
    };
  }

  // ----------------------------------------------------------------- drawing
  function polyline(ctx, project, points, close) {
    let started = false;
    ctx.beginPath();
    for (const p of points) {
      const s = project(p);
      if (s === null) { started = false; continue; }
      if (started) ctx.lineTo(s[0], s[1]); else { ctx.moveTo(s[0], s[1]); started = true; }
    }
    if (close && started) ctx.closePath();
    ctx.stroke();
  }

  function drawGround(ctx, project) {
    ctx.save();
    ctx.lineWidth = 1;
    ctx.strokeStyle = "rgba(150, 160, 175, 0.22)";
    const extent = 1.0, step = 0.25;
    for (let a = -extent; a <= extent + 1e-9; a += step) {
      polyline(ctx, project, [[a, -extent, 0], [a, extent, 0]]);
      polyline(ctx, project, [[-extent, a, 0], [extent, a, 0]]);
    }
    // "front" arrow along +x, so the operator knows which way the robot faces.
    ctx.strokeStyle = "rgba(200, 205, 215, 0.55)";
    ctx.lineWidth = 2;
    polyline(ctx, project, [[0.2, 0, 0], [0.5, 0, 0]]);
    polyline(ctx, project, [[0.43, 0.04, 0], [0.5, 0, 0], [0.43, -0.04, 0]]);
    const label = project([0.58, 0, 0]);
    if (label) {
      ctx.fillStyle = "rgba(200, 205, 215, 0.7)";
      ctx.font = "12px sans-serif";
      ctx.fillText("front", label[0] - 14, label[1] + 4);
    }
    ctx.restore();
  }

  function drawPose(ctx, project, size, pose, style) {
    ctx.save();
    ctx.globalAlpha = style.alpha;
    ctx.strokeStyle = style.color;
    ctx.fillStyle = style.color;
    ctx.lineCap = "round";
    ctx.lineJoin = "round";
    ctx.setLineDash(style.dash);
    ctx.lineWidth = Math.max(1, style.width * 0.4);
    for (const sole of pose.soles || []) polyline(ctx, project, sole, true);
    ctx.lineWidth = style.width;
    for (const points of Object.values(pose.chains || {})) polyline(ctx, project, points, false);
    if (pose.head) {
      const c = project(pose.head.center);
      if (c !== null) {
        const focal = 0.5 * size.height / Math.tan(FOV / 2);
        ctx.beginPath();
        ctx.arc(c[0], c[1], Math.max(3, focal * pose.head.radius / c[2]), 0, 2 * Math.PI);
        ctx.lineWidth = Math.max(1.5, style.width * 0.6);
        ctx.stroke();
      }
      if (pose.gaze) { ctx.lineWidth = Math.max(1, style.width * 0.4); polyline(ctx, project, pose.gaze, false); }
    }
    if (style.joints > 0) {
      ctx.setLineDash([]);
      for (const points of Object.values(pose.chains || {})) {
        for (const p of points) {
          const s = project(p);
          if (s === null) continue;
          ctx.beginPath();
          ctx.arc(s[0], s[1], style.joints, 0, 2 * Math.PI);
          ctx.fill();
        }
      }
    }
    ctx.restore();
  }

  // The canvas keeps its CSS size (the width/height attributes of the page) and gets
  // devicePixelRatio times more pixels, so lines stay sharp on high-density screens.
  const cssSize = {width: 0, height: 0};
  // Only the width is set: the page's CSS caps it to the window (max-width) and the height
  // follows the canvas's aspect ratio.
  function fitCanvas(canvas) {
    if (cssSize.width === 0) {
      cssSize.width = canvas.width;
      cssSize.height = canvas.height;
      canvas.style.width = cssSize.width + "px";
    }
    const dpr = window.devicePixelRatio || 1;
    const width = Math.round(cssSize.width * dpr), height = Math.round(cssSize.height * dpr);
    if (canvas.width !== width || canvas.height !== height) { canvas.width = width; canvas.height = height; }
    return dpr;
  }

  function draw(canvas) {
    const dpr = fitCanvas(canvas);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);  // draw in CSS pixels
    ctx.save();
    ctx.fillStyle = BACKGROUND;
    ctx.fillRect(0, 0, cssSize.width, cssSize.height);
    ctx.restore();
    const size = cssSize;
    const project = makeCamera(size);
    drawGround(ctx, project);
    const poses = documentData ? documentData.poses || {} : {};
    let drawn = 0;
    for (const name of Object.keys(STYLES)) {
      if (poses[name]) { drawPose(ctx, project, size, poses[name], STYLES[name]); drawn += 1; }
    }
    if (drawn === 0) {
      ctx.fillStyle = "#8b949e";
      ctx.font = "14px sans-serif";
      ctx.fillText(statusText || "waiting for robot poses ...", 16, 28);
    }
    updateLegend(poses);
  }

  // The poses the view labels (all three until a document says otherwise).
  function legendNames() {
    return labels ? LEGEND_ORDER.filter((name) => name in labels) : LEGEND_ORDER;
  }

  function updateLegend(poses) {
    const legend = document.getElementById("robot-view-legend");
    if (!legend) return;
    const names = legendNames();
    if (legend.dataset.built !== names.join(",")) {
      legend.dataset.built = names.join(",");
      legend.replaceChildren();
      for (const name of names) {
        const item = document.createElement("span");
        item.className = "legend-item";
        item.id = "legend-" + name;
        const swatch = document.createElement("span");
        swatch.className = "swatch swatch-" + name;
        swatch.style.borderColor = STYLES[name].color;
        swatch.style.borderTopStyle = STYLES[name].dash.length ? "dashed" : "solid";
        swatch.style.opacity = STYLES[name].alpha < 1 ? "0.6" : "1";
        const text = document.createElement("span");
        text.className = "legend-text";
        item.append(swatch, text);
        legend.append(item);
      }
    }
    for (const name of names) {
      const item = document.getElementById("legend-" + name);
      item.querySelector(".legend-text").textContent =
        ((labels && labels[name]) || name) + (poses[name] ? "" : " (no data yet)");
      item.classList.toggle("missing", !poses[name]);
    }
    const info = document.getElementById("robot-view-info");
    if (info && documentData && documentData.info) {
      const i = documentData.info, parts = [];
      if (i.forward_delay_s != null) parts.push("forward delay " + (1000 * i.forward_delay_s).toFixed(0) + " ms");
      if (i.compensation != null) parts.push("compensation " + i.compensation);
      if (i.watchdog != null) parts.push("watchdog " + i.watchdog);
      // "relaxed" is routine; "rejected_target"/"held" mean the ghost is not the operator's pose.
      if (i.ghost_solver && !["ok", "relaxed"].includes(i.ghost_solver)) parts.push("ghost IK " + i.ghost_solver);
      for (const key of ["ghost_error", "actual_error", "predicted_error"]) if (i[key]) parts.push(key + ": " + i[key]);
      info.textContent = parts.join(" · ");
    }
  }

  // ------------------------------------------------------------------ input
  function installControls(canvas) {
    let dragging = null;
    canvas.addEventListener("pointerdown", (e) => {
      dragging = {x: e.clientX, y: e.clientY};
      canvas.setPointerCapture(e.pointerId);
    });
    canvas.addEventListener("pointermove", (e) => {
      if (dragging === null) return;
      const dx = e.clientX - dragging.x, dy = e.clientY - dragging.y;
      dragging = {x: e.clientX, y: e.clientY};
      view.azimuth -= dx * 0.01;
      view.elevation = Math.min(1.45, Math.max(-0.3, view.elevation + dy * 0.01));
      draw(canvas);
    });
    const stop = () => { dragging = null; };
    canvas.addEventListener("pointerup", stop);
    canvas.addEventListener("pointercancel", stop);
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      view.distance = Math.min(8, Math.max(0.6, view.distance * Math.exp(e.deltaY * 0.001)));
      draw(canvas);
    }, {passive: false});
    canvas.addEventListener("dblclick", () => {
      Object.assign(view, {...HOME_VIEW, target: HOME_VIEW.target.slice()});
      draw(canvas);
    });
  }

  // ---------------------------------------------------------------- polling
  // One poll; the next is armed only when this one settled (see fetchJson in the page).
  async function poll(canvas) {
    try {
      const answer = await window.teleopRobotView.fetchJson("/robot-pose", REQUEST_TIMEOUT_MS);
      if (!answer.ok) throw new Error("/robot-pose: HTTP " + answer.status);
      acceptDocument(answer.data);
    } catch (error) {
      pollFailed(error);
    } finally {
      draw(canvas);
      setTimeout(() => poll(canvas), POLL_MS);
    }
  }

  function acceptDocument(data) {
    documentData = data;
    labels = data.labels || labels;
    statusText = "";
    lastGoodPollMs = performance.now();
  }

  // An error status and an unreachable server alike: keep the poses through a short
  // hiccup, then say the data is gone rather than show old poses as current.
  function pollFailed(error) {
    const silentS = (performance.now() - lastGoodPollMs) / 1000;
    if (silentS * 1000 < STALE_MS) return;
    documentData = null;
    statusText = "connection lost: no robot pose for " + silentS.toFixed(0) + " s (" + (error.message || error) + ")";
  }

  const canvas = document.getElementById("robot-view");
  if (!canvas) return;
  installControls(canvas);
  const hint = document.getElementById("robot-view-hint");
  if (hint) hint.hidden = false;
  // Through the page's hook: the page also calls us after every /stats poll.
  window.teleopRobotView.setRenderer((c) => draw(c));
  // Exposed for tests and the console: the current camera and the last document.
  window.teleopRobotView.camera = view;
  window.teleopRobotView.lastDocument = () => documentData;
  draw(canvas);
  poll(canvas);
})();
