// Validates rendered Kubernetes manifests (the output of `kubectl kustomize`): every
// object against the Kubernetes schemas of the npm package kubernetes-models 4.x
// (validate(), plus a check for fields the schemas do not know, which validate() lets
// through), then Cascade's own rules: every referenced PVC, ConfigMap, Secret and
// Service is defined, probes, resources, security settings, NetworkPolicies, and the
// flags given to the binaries. Run by validate_kubernetes.sh; exits 1 on any error.
//
//   node validate.mjs --modules DIR --repo ROOT --profile cpu|gpu|ha|gpu-ha --rendered FILE
//                     [--extra FILE]... [--bin BIN_DIR]
//
// --profile: gpu* checks GPU workers; *ha checks standby coordinators (a StatefulSet
//            electing a leader on etcd, the workers following all of them, the etcd).
// --modules: the folder whose node_modules holds kubernetes-models and yaml.
// --extra:   more manifests (not rendered by kustomize) checked beside the rendering.
// --bin:     where cascade-coordinator and cascade-worker are; their --help lists the
//            flags the manifests may use.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";

// ---------------------------------------------------------------------------------
// Arguments.
const opts = { extra: [] };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  const v = process.argv[++i];
  if (v === undefined) usage(`${a} needs a value`);
  if (a === "--extra") opts.extra.push(v);
  else if (["--modules", "--repo", "--profile", "--rendered", "--bin"].includes(a)) opts[a.slice(2)] = v;
  else usage(`unknown argument ${a}`);
}
for (const k of ["modules", "repo", "profile", "rendered"]) if (!opts[k]) usage(`--${k} is required`);
if (!["cpu", "gpu", "ha", "gpu-ha"].includes(opts.profile)) usage("--profile is cpu, gpu, ha or gpu-ha");
const GPU = opts.profile.startsWith("gpu");
const HA = opts.profile.endsWith("ha");
function usage(msg) {
  console.error(`validate.mjs: ${msg}`);
  process.exit(2);
}

const require = createRequire(path.join(path.resolve(opts.modules), "package.json"));
const YAML = require("yaml");
const modelsRoot = path.dirname(require.resolve("kubernetes-models/package.json"));
const nodeModules = path.dirname(modelsRoot);

// Secrets the manifests reference but do not define, on purpose: nothing secret is
// committed. deploy/README.md must say how to create each.
const EXTERNAL_SECRETS = {
  "cascade-join-token": "kubectl create secret generic cascade-join-token",
};

// Flags whose value is the address of another process (NAME:PORT), or a comma-separated
// list of them (--coordinator of standby coordinators, --etcd).
const ADDRESS_FLAGS = ["--coordinator", "--advertise", "--server", "--etcd"];

const errors = [];
const notes = [];
const err = (where, msg) => errors.push(`${where}: ${msg}`);
const note = (msg) => notes.push(msg);

// ---------------------------------------------------------------------------------
// Load the documents.
function loadDocs(file) {
  const text = fs.readFileSync(file, "utf8");
  const out = [];
  YAML.parseAllDocuments(text).forEach((doc, i) => {
    if (doc.errors.length) {
      for (const e of doc.errors) err(`${file} document ${i + 1}`, `YAML: ${e.message}`);
      return;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) return;
    out.push({ obj, src: file });
  });
  return out;
}
const rendered = loadDocs(opts.rendered);
const extras = opts.extra.flatMap(loadDocs);
const all = [...rendered, ...extras];
if (rendered.length === 0) err(opts.rendered, "no objects rendered");

const id = (o) => `${o?.kind ?? "?"}/${o?.metadata?.name ?? "?"}`;

// ---------------------------------------------------------------------------------
// 1. Schemas: the kubernetes-models class for apiVersion/kind, and its validate().
function modelClass(apiVersion, kind) {
  let mod;
  try {
    mod = require(`kubernetes-models/${apiVersion}`);
  } catch {
    return null;
  }
  const cls = mod[kind];
  return cls && cls.kind === kind && cls.apiVersion === apiVersion ? cls : null;
}

// validate() ignores fields the schema does not define (a misspelt "readinessprobe"
// passes). The .d.ts files of kubernetes-models list every type's fields; walk the
// object along them and report any field they do not list.
const dtsCache = new Map();
function parseDts(file) {
  if (dtsCache.has(file)) return dtsCache.get(file);
  const text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const imports = {};
  for (const m of text.matchAll(/import \{([^}]*)\} from "([^"]+)"/g)) {
    for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
      imports[name] = m[2];
    }
  }
  const locals = {}; // local name -> {props} | {alias: typeText}
  for (const m of text.matchAll(/export interface (\w+)(?: extends [\w, ]+)? \{/g)) {
    locals[m[1]] = { props: parseProps(text, m.index + m[0].length) };
  }
  for (const m of text.matchAll(/export declare type (\w+) = ([^;]+);/g)) {
    locals[m[1]] = { alias: m[2].trim() };
  }
  const exported = {}; // exported alias -> local name
  for (const m of text.matchAll(/export \{([^}]*)\}/g)) {
    for (const part of m[1].split(",")) {
      const [local, as] = part.split(" as ").map((s) => s.trim());
      if (local) exported[as || local] = local;
    }
  }
  const info = { file, imports, locals, exported };
  dtsCache.set(file, info);
  return info;
}
// Reads `"name"?: Type;` members from just after an interface's "{" to its "}".
function parseProps(text, start) {
  const props = {};
  let i = start;
  for (;;) {
    while (/\s/.test(text[i])) i++;
    if (text[i] === "}" || i >= text.length) return props;
    const m = /^"([^"]+)"\??: /.exec(text.slice(i, i + 200));
    if (!m) throw new Error(`cannot read a member at: ${text.slice(i, i + 60)}`);
    i += m[0].length;
    let depth = 0;
    const t0 = i;
    for (; i < text.length; i++) {
      const c = text[i];
      if (c === "{" || c === "<" || c === "(") depth++;
      else if (c === "}" || c === ">" || c === ")") depth--;
      else if (c === ";" && depth === 0) break;
    }
    props[m[1]] = text.slice(t0, i).trim();
    i++;
  }
}
function resolveImport(fromFile, spec) {
  if (spec.startsWith(".")) return path.resolve(path.dirname(fromFile), `${spec}.d.ts`);
  return path.join(nodeModules, `${spec}.d.ts`);
}
// A type, as {kind: "object", props, file} | {kind: "array", of} | {kind: "map", of} |
// {kind: "leaf"}.
function resolveType(typeText, file) {
  typeText = typeText.trim();
  let m = /^Array<([\s\S]+)>$/.exec(typeText);
  if (m) return { kind: "array", of: () => resolveType(m[1], file) };
  m = /^\{\s*\[key: string\]: ([\s\S]+?);?\s*\}$/.exec(typeText);
  if (m) return { kind: "map", of: () => resolveType(m[1], file) };
  if (!/^\w+$/.test(typeText)) return { kind: "leaf" };
  const info = parseDts(file);
  const local = info.locals[typeText] || info.locals[info.exported[typeText]];
  if (local) {
    if (local.props) return { kind: "object", props: local.props, file };
    return resolveType(local.alias, file);
  }
  if (info.imports[typeText]) {
    const target = resolveImport(file, info.imports[typeText]);
    if (!fs.existsSync(target)) return { kind: "leaf" };
    return resolveType(typeText, target);
  }
  return { kind: "leaf" };
}
function unknownFields(value, type, where) {
  if (value === null || value === undefined) return;
  if (type.kind === "array" && Array.isArray(value)) {
    const of = type.of();
    value.forEach((v, i) => unknownFields(v, of, `${where}[${i}]`));
  } else if (type.kind === "map" && typeof value === "object") {
    const of = type.of();
    for (const [k, v] of Object.entries(value)) unknownFields(v, of, `${where}.${k}`);
  } else if (type.kind === "object" && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) {
      if (!(k in type.props)) {
        err(where, `unknown field "${k}" (not in the ${path.basename(type.file, ".d.ts")} schema)`);
      } else {
        unknownFields(v, resolveType(type.props[k], type.file), `${where}.${k}`);
      }
    }
  }
}

const kindsSeen = new Map();
for (const { obj, src } of all) {
  const where = `${path.basename(src)} ${id(obj)}`;
  if (!obj.apiVersion || !obj.kind || !obj.metadata?.name) {
    err(where, "every object needs apiVersion, kind and metadata.name");
    continue;
  }
  const cls = modelClass(obj.apiVersion, obj.kind);
  if (!cls) {
    err(where, `unknown kind: kubernetes-models has no ${obj.apiVersion} ${obj.kind}`);
    continue;
  }
  try {
    new cls(obj).validate();
  } catch (e) {
    const list = Array.isArray(e.errors) && e.errors.length ? e.errors : [{ message: e.message }];
    for (const x of list) err(where, `schema: ${x.instancePath ?? ""} ${x.message}`.replace(/\s+/g, " "));
  }
  const group = obj.apiVersion.includes("/") ? obj.apiVersion.split("/")[0] : "";
  const dir = group ? path.join(modelsRoot, obj.apiVersion) : path.join(modelsRoot, "v1");
  const dts = path.join(dir, `${obj.kind}.d.ts`);
  if (fs.existsSync(dts)) unknownFields(obj, resolveType(`I${obj.kind}`, dts), where);
  else err(where, `no type description ${dts}`);
  kindsSeen.set(`${obj.apiVersion} ${obj.kind}`, (kindsSeen.get(`${obj.apiVersion} ${obj.kind}`) ?? 0) + 1);
}

// ---------------------------------------------------------------------------------
// 2. References and Cascade's rules.
const byKind = (kind, docs = all) => docs.map((d) => d.obj).filter((o) => o?.kind === kind);
const names = (kind) => new Set(byKind(kind).map((o) => o.metadata?.name));
const services = byKind("Service");
const configMaps = byKind("ConfigMap");
const secrets = names("Secret");
const pvcs = names("PersistentVolumeClaim");

// Workloads and their pod templates.
const workloads = [];
for (const o of all.map((d) => d.obj)) {
  if (!o?.kind) continue;
  if (["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"].includes(o.kind)) {
    workloads.push({ o, meta: o.spec?.template?.metadata ?? {}, spec: o.spec?.template?.spec ?? {} });
  } else if (o.kind === "CronJob") {
    const t = o.spec?.jobTemplate?.spec?.template ?? {};
    workloads.push({ o, meta: t.metadata ?? {}, spec: t.spec ?? {} });
  } else if (o.kind === "Pod") {
    workloads.push({ o, meta: o.metadata ?? {}, spec: o.spec ?? {} });
  }
  if (o.kind === "StatefulSet") {
    for (const t of o.spec?.volumeClaimTemplates ?? []) pvcs.add(`${t.metadata?.name}-${o.metadata.name}`);
  }
}
const fromKustomize = new Set(rendered.map((d) => d.obj));
const component = (w) => w.meta.labels?.["app.kubernetes.io/component"];
const containersOf = (w) => [...(w.spec.initContainers ?? []), ...(w.spec.containers ?? [])];
const selects = (selector, labels) =>
  selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);
const readme = (() => {
  try {
    return fs.readFileSync(path.join(opts.repo, "deploy/README.md"), "utf8");
  } catch {
    return "";
  }
})();

function checkSecretRef(where, name, optional) {
  if (secrets.has(name)) return;
  if (EXTERNAL_SECRETS[name]) {
    if (!readme.includes(EXTERNAL_SECRETS[name])) {
      err(where, `Secret ${name} is created outside kustomize, but deploy/README.md does not show "${EXTERNAL_SECRETS[name]}"`);
    }
    return;
  }
  if (optional) return;
  err(where, `references Secret ${name}, which is not defined (and not optional)`);
}
function checkConfigMapRef(where, name, optional, key) {
  const cm = configMaps.find((c) => c.metadata.name === name);
  if (!cm) {
    if (!optional) err(where, `references ConfigMap ${name}, which is not defined`);
    return;
  }
  if (key && !(key in (cm.data ?? {})) && !(key in (cm.binaryData ?? {}))) {
    err(where, `ConfigMap ${name} has no key ${key}`);
  }
}

// Expands $(VAR) in an argument from the container's env (fieldRef metadata.name: the
// first pod's name).
function envOf(w, c) {
  const env = {};
  for (const e of c.env ?? []) {
    if (e.value !== undefined) env[e.name] = String(e.value);
    else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.name") {
      env[e.name] = w.o.kind === "StatefulSet" ? `${w.o.metadata.name}-0` : `${w.o.metadata.name}-pod`;
    } else env[e.name] = `<${e.name}>`;
  }
  return env;
}
const expand = (s, env) => String(s).replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n) => (n in env ? env[n] : m));
// "--flag=value" and "--flag value" forms, as [flag, value|undefined].
function flagsOf(args) {
  const out = [];
  for (let i = 0; i < args.length; i++) {
    const a = String(args[i]);
    if (!a.startsWith("--")) continue;
    const eq = a.indexOf("=");
    if (eq > 0) out.push([a.slice(0, eq), a.slice(eq + 1)]);
    else if (i + 1 < args.length && !String(args[i + 1]).startsWith("--")) out.push([a, String(args[++i])]);
    else out.push([a, undefined]);
  }
  return out;
}
const flagValue = (flags, name) => flags.find(([f]) => f === name)?.[1];
// The binary a container runs: its command, or the one a shell wrapper in it execs.
function binaryOf(c) {
  const text = (c.command ?? []).join(" ");
  for (const b of ["cascade-coordinator", "cascade-worker"]) if (text.includes(b)) return b;
  return null;
}
const containerPorts = (c) => (c.ports ?? []).map((p) => ({ name: p.name, port: p.containerPort }));
function portOf(c, port) {
  if (typeof port === "number") return containerPorts(c).find((p) => p.port === port);
  return containerPorts(c).find((p) => p.name === port);
}
const hostPort = (v) => {
  const m = /^(.*):(\d+)$/.exec(v ?? "");
  return m ? { host: m[1], port: Number(m[2]) } : null;
};
const isWildcardOrIp = (h) => h === "" || h === "0.0.0.0" || h === "[::]" || h === "localhost" || /^[\d.]+$/.test(h) || h.startsWith("[");

// Flags each binary accepts, from its --help.
const helpFlags = {};
if (opts.bin) {
  for (const b of ["cascade-coordinator", "cascade-worker"]) {
    const exe = path.join(opts.bin, b);
    if (!fs.existsSync(exe)) {
      note(`${exe} not found: flags not checked against it`);
      continue;
    }
    try {
      const out = execFileSync(exe, ["--help"], { encoding: "utf8", timeout: 20000, stdio: ["ignore", "pipe", "pipe"] });
      helpFlags[b] = new Set(out.match(/--[a-z0-9][a-z0-9-]*/g) ?? []);
    } catch (e) {
      err(exe, `--help failed: ${e.message.split("\n")[0]}`);
    }
  }
} else {
  note("no --bin: flags and cluster-file keys not checked against the binaries");
}
function checkFlag(where, binary, flag) {
  const known = helpFlags[binary];
  if (!known || known.has(flag)) return;
  err(where, `${binary} has no flag ${flag}`);
}

const coordinators = workloads.filter((w) => component(w) === "coordinator");
const workers = workloads.filter((w) => component(w) === "worker");
if (coordinators.length !== 1) err(opts.rendered, `expected one coordinator workload, found ${coordinators.length}`);
if (workers.length !== 1) err(opts.rendered, `expected one worker workload, found ${workers.length}`);
const publicService = services.find((s) => s.metadata.name === "cascade");
if (!publicService) err(opts.rendered, "no Service named cascade (the public API)");

let clusterFile = null; // the coordinator's --config, parsed
for (const w of workloads) {
  const wid = id(w.o);
  const volumes = Object.fromEntries((w.spec.volumes ?? []).map((v) => [v.name, v]));
  // A StatefulSet's volumeClaimTemplates are volumes of its pods too.
  for (const t of w.o.kind === "StatefulSet" ? w.o.spec?.volumeClaimTemplates ?? [] : []) {
    if (t.metadata?.name) volumes[t.metadata.name] = { name: t.metadata.name, claimTemplate: t };
  }
  // Volumes: every PVC, ConfigMap and Secret they name.
  for (const v of w.spec.volumes ?? []) {
    const where = `${wid} volume ${v.name}`;
    if (v.persistentVolumeClaim && !pvcs.has(v.persistentVolumeClaim.claimName)) {
      err(where, `references PersistentVolumeClaim ${v.persistentVolumeClaim.claimName}, which is not defined`);
    }
    if (v.configMap) {
      checkConfigMapRef(where, v.configMap.name, v.configMap.optional);
      for (const it of v.configMap.items ?? []) checkConfigMapRef(where, v.configMap.name, v.configMap.optional, it.key);
    }
    if (v.secret) checkSecretRef(where, v.secret.secretName, v.secret.optional);
    for (const s of v.projected?.sources ?? []) {
      if (s.secret) checkSecretRef(where, s.secret.name, s.secret.optional);
      if (s.configMap) checkConfigMapRef(where, s.configMap.name, s.configMap.optional);
    }
  }
  if (w.o.kind === "StatefulSet") {
    const svc = services.find((s) => s.metadata.name === w.o.spec.serviceName);
    if (!svc) err(wid, `serviceName ${w.o.spec.serviceName} is not a defined Service`);
    else if (svc.spec?.clusterIP !== "None") err(wid, `Service ${svc.metadata.name} must be headless (clusterIP: None)`);
  }
  // Pod-level security.
  const psc = w.spec.securityContext ?? {};
  for (const c of containersOf(w)) {
    const where = `${wid} container ${c.name}`;
    const env = envOf(w, c);
    for (const e of c.env ?? []) {
      const k = e.valueFrom?.secretKeyRef;
      if (k) checkSecretRef(where, k.name, k.optional);
      const cm = e.valueFrom?.configMapKeyRef;
      if (cm) checkConfigMapRef(where, cm.name, cm.optional, cm.key);
    }
    for (const e of c.envFrom ?? []) {
      if (e.secretRef) checkSecretRef(where, e.secretRef.name, e.secretRef.optional);
      if (e.configMapRef) checkConfigMapRef(where, e.configMapRef.name, e.configMapRef.optional);
    }
    for (const m of c.volumeMounts ?? []) {
      if (!volumes[m.name]) err(where, `mounts volume ${m.name}, which the pod does not define`);
    }
    const sc = c.securityContext ?? {};
    if (!(sc.runAsNonRoot ?? psc.runAsNonRoot)) err(where, "must run as non-root (runAsNonRoot: true)");
    if (sc.readOnlyRootFilesystem !== true) err(where, "needs readOnlyRootFilesystem: true");
    if (sc.allowPrivilegeEscalation !== false) err(where, "needs allowPrivilegeEscalation: false");
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) err(where, "must drop ALL capabilities");
    if (!c.image) err(where, "has no image");

    // Files given to flags lie on a mounted volume; a ConfigMap's must be one of its keys.
    const binary = binaryOf(c);
    if (!binary) continue;
    const shellText = (c.command ?? []).join("\n");
    const wrapperFlags = [...shellText.matchAll(/(--[a-z0-9-]+)=/g)].map((m) => [m[1], undefined]);
    const flags = flagsOf((c.args ?? []).map((a) => expand(a, env)));
    for (const [f] of [...flags, ...wrapperFlags]) checkFlag(where, binary, f);
    for (const [f, v] of flags) {
      if (!v) continue;
      if (f === "--config" || f.endsWith("-file") || f === "--model-dir") {
        const mount = (c.volumeMounts ?? []).find((m) => v === m.mountPath || v.startsWith(`${m.mountPath}/`));
        if (!mount) {
          err(where, `${f}=${v} is on no mounted volume`);
          continue;
        }
        const vol = volumes[mount.name];
        const rel = path.relative(mount.mountPath, v);
        if (vol?.configMap && rel) {
          const items = vol.configMap.items;
          const key = items ? items.find((it) => it.path === rel)?.key : rel;
          if (!key) err(where, `${f}=${v}: ConfigMap volume ${mount.name} has no item at ${rel}`);
          else checkConfigMapRef(where, vol.configMap.name, false, key);
          if (f === "--config" && key) {
            const cm = configMaps.find((x) => x.metadata.name === vol.configMap.name);
            if (cm?.data?.[key] !== undefined) clusterFile = { cm, key, data: YAML.parse(cm.data[key]) ?? {} };
          }
        }
      }
      // Listen addresses: their ports are declared container ports.
      if (f.endsWith("listen")) {
        const hp = hostPort(v);
        if (!hp) err(where, `${f}=${v} is not HOST:PORT`);
        else if (!portOf(c, hp.port)) err(where, `${f}=${v}: port ${hp.port} is not among the container's ports`);
        continue;
      }
      // Other addresses name a Service (NAME:PORT) or a StatefulSet pod behind a
      // headless Service (POD.SERVICE:PORT); the Service must define the port and
      // publish pods before they are ready (workers and coordinator reach each other
      // during bring-up, before the coordinator is ready). A list (A,B,...) is checked
      // address by address.
      if (!ADDRESS_FLAGS.includes(f)) continue;
      for (const a of v.split(",")) checkAddress(where, f, a.trim());
    }
  }
}

function checkAddress(where, f, v) {
  const hp = hostPort(v);
  if (!hp) {
    err(where, `${f}: ${v} is not HOST:PORT`);
    return;
  }
  if (isWildcardOrIp(hp.host)) return;
  // NAME[.NAMESPACE.svc...] or POD.NAME[...]
  const labels = hp.host.split(".");
  let svc = services.find((s) => s.metadata.name === labels[0]);
  if (!svc && labels.length > 1) {
    svc = services.find((s) => s.metadata.name === labels[1] && s.spec?.clusterIP === "None");
    // POD.SERVICE: a pod of a StatefulSet governed by that Service.
    if (svc && !statefulPods(svc.metadata.name).includes(labels[0])) {
      err(where, `${f}: ${v}: ${labels[0]} is not a pod of a StatefulSet with serviceName ${labels[1]} (${statefulPods(labels[1]).join(", ") || "none"})`);
    }
  }
  if (!svc) {
    err(where, `${f}: ${v}: names no defined Service (${labels[0]}${labels.length > 1 ? `, or headless ${labels[1]}` : ""})`);
    return;
  }
  if (!(svc.spec?.ports ?? []).some((p) => p.port === hp.port)) {
    err(where, `${f}: ${v}: Service ${svc.metadata.name} has no port ${hp.port}`);
  }
  if (svc.spec?.publishNotReadyAddresses !== true) {
    err(where, `${f}: ${v}: Service ${svc.metadata.name} needs publishNotReadyAddresses: true (it is used during bring-up, before pods are ready)`);
  }
}
// The pod names of the StatefulSets whose serviceName is `service`.
function statefulPods(service) {
  return workloads
    .filter((w) => w.o.kind === "StatefulSet" && w.o.spec?.serviceName === service)
    .flatMap((w) => Array.from({ length: Number(w.o.spec?.replicas ?? 1) }, (_, i) => `${w.o.metadata.name}-${i}`));
}

// Probes on the coordinator and the workers.
for (const w of [...coordinators, ...workers]) {
  for (const c of w.spec.containers ?? []) {
    const where = `${id(w.o)} container ${c.name}`;
    for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) {
      const probe = c[p];
      if (!probe) {
        err(where, `has no ${p}`);
        continue;
      }
      const port = probe.tcpSocket?.port ?? probe.grpc?.port ?? probe.httpGet?.port;
      if (port === undefined) {
        if (!probe.exec) err(where, `${p} has no port`);
      } else if (!portOf(c, port)) err(where, `${p} port ${port} is not among the container's ports`);
    }
    const r = c.resources ?? {};
    for (const kind of ["requests", "limits"]) {
      for (const res of ["cpu", "memory"]) if (!r[kind]?.[res]) err(where, `has no resources.${kind}.${res}`);
    }
  }
}

// The coordinator: readiness on gRPC health, liveness not on the cluster's state, the
// HTTP API exposed and scraped, a grace period longer than the drain.
for (const w of coordinators) {
  const c = (w.spec.containers ?? []).find((x) => binaryOf(x) === "cascade-coordinator");
  const where = id(w.o);
  if (!c) {
    err(where, "no container runs cascade-coordinator");
    continue;
  }
  const flags = flagsOf(c.args ?? []);
  const listen = hostPort(flagValue(flags, "--listen"));
  const http = hostPort(flagValue(flags, "--http-listen"));
  if (!listen) err(where, "no --listen HOST:PORT");
  if (!http) err(where, "no --http-listen HOST:PORT (the HTTP API, /health and /metrics)");
  const rp = c.readinessProbe;
  if (!rp?.grpc || (listen && rp.grpc.port !== listen.port) || (rp.grpc.service ?? "") !== "") {
    err(where, "readinessProbe must be gRPC health (service \"\") on the --listen port: SERVING only when the pipeline is loaded");
  }
  const lp = c.livenessProbe ?? {};
  if ((lp.grpc && (lp.grpc.service ?? "") === "") || lp.httpGet?.path === "/health") {
    err(where, "livenessProbe must not follow the cluster's state (gRPC health \"\" or /health): missing workers would restart the coordinator");
  }
  const ann = w.meta.annotations ?? {};
  if (ann["prometheus.io/scrape"] !== "true") err(where, 'pod annotation prometheus.io/scrape must be "true"');
  if (ann["prometheus.io/path"] !== "/metrics") err(where, "pod annotation prometheus.io/path must be /metrics");
  if (http && ann["prometheus.io/port"] !== String(http.port)) {
    err(where, `pod annotation prometheus.io/port must be the --http-listen port ${http.port}`);
  }
  if (publicService) {
    const targets = (publicService.spec?.ports ?? []).map((p) => portOf(c, p.targetPort ?? p.port)?.port);
    for (const [what, hp] of [["--listen", listen], ["--http-listen", http]]) {
      if (hp && !targets.includes(hp.port)) err(where, `Service cascade does not expose the ${what} port ${hp.port}`);
    }
  }
  const drain = Number(flagValue(flags, "--drain-timeout-s") ?? clusterFile?.data?.drain_timeout_s ?? 30);
  const grace = w.spec.terminationGracePeriodSeconds ?? 30;
  if (!(grace > drain)) err(where, `terminationGracePeriodSeconds ${grace} must exceed --drain-timeout-s ${drain}`);

  // The cluster file: keys are the coordinator's flags; workers match the replicas;
  // the model is where both the coordinator and the workers can read it.
  if (!clusterFile) {
    err(where, "--config does not name a key of a ConfigMap mounted in the coordinator");
    continue;
  }
  const cf = clusterFile.data;
  if (typeof cf !== "object" || Array.isArray(cf)) {
    err(`ConfigMap ${clusterFile.cm.metadata.name}`, `${clusterFile.key} is not a YAML mapping`);
    continue;
  }
  for (const [k, v] of Object.entries(cf)) {
    if (v !== null && typeof v === "object") err(`ConfigMap ${clusterFile.cm.metadata.name}`, `${k}: values must be scalars`);
    checkFlag(`ConfigMap ${clusterFile.cm.metadata.name} key ${k}`, "cascade-coordinator", `--${k.replaceAll("_", "-")}`);
  }
  for (const ww of workers) {
    if (Number(cf.workers ?? 1) !== Number(ww.o.spec?.replicas ?? 1)) {
      err(`ConfigMap ${clusterFile.cm.metadata.name}`, `workers: ${cf.workers} but ${id(ww.o)} has replicas: ${ww.o.spec?.replicas ?? 1}`);
    }
    const wc = (ww.spec.containers ?? []).find((x) => binaryOf(x) === "cascade-worker");
    const modelDir = wc && flagValue(flagsOf(wc.args ?? []), "--model-dir");
    if (cf.model && modelDir && !String(cf.model).startsWith(`${modelDir.replace(/\/$/, "")}/`)) {
      err(`ConfigMap ${clusterFile.cm.metadata.name}`, `model ${cf.model} is outside the workers' --model-dir ${modelDir}`);
    }
  }
  if (cf.model && !(c.volumeMounts ?? []).some((m) => String(cf.model).startsWith(`${m.mountPath}/`))) {
    err(where, `the model ${cf.model} is on no volume mounted in the coordinator`);
  }
  if ("device" in cf) err(`ConfigMap ${clusterFile.cm.metadata.name}`, "sets device for every stage; leave it to each worker's --device");
}

// Services select pods that have their target ports.
for (const s of services) {
  const where = id(s);
  const selected = workloads.filter((w) => selects(s.spec?.selector, w.meta.labels) && fromKustomize.has(w.o));
  if (selected.length === 0) {
    err(where, "its selector matches no workload's pods");
    continue;
  }
  for (const p of s.spec?.ports ?? []) {
    for (const w of selected) {
      if (!(w.spec.containers ?? []).some((c) => portOf(c, p.targetPort ?? p.port))) {
        err(where, `port ${p.name ?? p.port}: target ${p.targetPort ?? p.port} is not a port of ${id(w.o)}`);
      }
    }
  }
}

// NetworkPolicies: every Cascade pod is covered; the public ports (those of Service
// cascade) are open to all; every other port only to Cascade pods.
const policies = byKind("NetworkPolicy");
const publicPorts = new Set();
for (const w of coordinators) {
  for (const p of publicService?.spec?.ports ?? []) {
    for (const c of w.spec.containers ?? []) {
      const cp = portOf(c, p.targetPort ?? p.port);
      if (cp) publicPorts.add(cp.port);
    }
  }
}
const ruleAllows = (rule, port) =>
  !rule.ports || rule.ports.length === 0 || rule.ports.some((rp) => rp.port === port.port || rp.port === port.name);
const onlyCascadePeers = (rule) =>
  (rule.from ?? []).length > 0 &&
  rule.from.every((peer) => !peer.ipBlock && !peer.namespaceSelector && peer.podSelector?.matchLabels?.["app.kubernetes.io/name"] === "cascade");
for (const w of [...coordinators, ...workers]) {
  const where = id(w.o);
  const mine = policies.filter((p) => (p.spec?.policyTypes ?? ["Ingress"]).includes("Ingress") &&
    Object.entries(p.spec?.podSelector?.matchLabels ?? {}).every(([k, v]) => w.meta.labels?.[k] === v));
  if (mine.length === 0) {
    err(where, "no NetworkPolicy selects its pods (every port would be open to all)");
    continue;
  }
  const rules = mine.flatMap((p) => p.spec?.ingress ?? []);
  for (const c of w.spec.containers ?? []) {
    for (const port of containerPorts(c)) {
      const allowing = rules.filter((r) => ruleAllows(r, port));
      if (publicPorts.has(port.port)) {
        if (!allowing.some((r) => !r.from || r.from.length === 0)) err(where, `public port ${port.port} is not open to all`);
      } else if (allowing.length === 0) {
        err(where, `port ${port.port} (${port.name}) is closed to Cascade pods too`);
      } else if (!allowing.every(onlyCascadePeers)) {
        err(where, `port ${port.port} (${port.name}) is open beyond Cascade pods`);
      }
    }
  }
}

// Standby coordinators (profiles *ha): a StatefulSet of two or more that elect a leader on
// etcd, each advertising its own name; the workers list every one of them; no Service
// with one virtual IP in front of their control port; the etcd they name, when rendered
// here, a quorum-sized StatefulSet whose --initial-cluster lists its pods.
if (HA) {
  for (const w of coordinators) {
    const where = id(w.o);
    const sts = w.o;
    if (sts.kind !== "StatefulSet") {
      err(where, "standby coordinators must be a StatefulSet (a stable name each, for the workers' --coordinator)");
      continue;
    }
    const replicas = Number(sts.spec?.replicas ?? 1);
    if (replicas < 2) err(where, `replicas ${replicas}: standby coordinators need at least 2`);
    if ((sts.spec?.podManagementPolicy ?? "OrderedReady") !== "Parallel") {
      err(where, "podManagementPolicy must be Parallel: a standby is never ready, so ordered start-up would stop at it");
    }
    if (sts.spec?.updateStrategy?.type !== "OnDelete") {
      err(where, "updateStrategy must be OnDelete: a RollingUpdate waits for each new pod to be ready, which a standby never is");
    }
    const c = (w.spec.containers ?? []).find((x) => binaryOf(x) === "cascade-coordinator");
    if (!c) continue;
    const env = envOf(w, c);
    const flags = flagsOf((c.args ?? []).map((a) => expand(a, env)));
    const etcd = flagValue(flags, "--etcd");
    if (!etcd || /\$\(|<[A-Z_]+>/.test(etcd)) err(where, `--etcd must name etcd's members (got ${etcd})`);
    const control = hostPort(flagValue(flags, "--control-listen"));
    const svc = services.find((x) => x.metadata.name === sts.spec?.serviceName);
    const own = `${sts.metadata.name}-0.${sts.spec?.serviceName}:${control?.port}`;
    if (flagValue(flags, "--advertise") !== own) {
      err(where, `--advertise must be the pod's own name, $(POD_NAME).${sts.spec?.serviceName}:${control?.port} (for the first pod ${own}; got ${flagValue(flags, "--advertise")})`);
    }
    if (svc && control && !(svc.spec?.ports ?? []).some((p) => p.port === control.port)) {
      err(where, `headless Service ${svc.metadata.name} has no control port ${control.port}`);
    }
    // Every coordinator, in the workers' --coordinator.
    const wanted = Array.from({ length: replicas }, (_, i) => `${sts.metadata.name}-${i}.${sts.spec?.serviceName}:${control?.port}`);
    for (const ww of workers) {
      const wc = (ww.spec.containers ?? []).find((x) => binaryOf(x) === "cascade-worker");
      const list = (flagValue(flagsOf((wc?.args ?? []).map((a) => expand(a, envOf(ww, wc)))), "--coordinator") ?? "")
        .split(",").map((a) => a.trim()).filter(Boolean);
      const missing = wanted.filter((a) => !list.includes(a));
      const extra = list.filter((a) => !wanted.includes(a));
      if (missing.length || extra.length) {
        err(id(ww.o), `--coordinator must list every coordinator's control address (${wanted.join(",")})${missing.length ? `; missing ${missing.join(",")}` : ""}${extra.length ? `; not a coordinator: ${extra.join(",")}` : ""}`);
      }
    }
    // One virtual IP over leader and standby would send registrations to either.
    for (const s2 of services) {
      if (s2.spec?.clusterIP === "None" || !selects(s2.spec?.selector, w.meta.labels)) continue;
      for (const p of s2.spec?.ports ?? []) {
        if (control && portOf(c, p.targetPort ?? p.port)?.port === control.port) {
          err(id(s2), "exposes the coordinators' control port behind one virtual IP: workers must reach each coordinator by name");
        }
      }
    }
    // The etcd StatefulSet(s) named by --etcd and rendered here.
    const members = (etcd ?? "").split(",").map((a) => hostPort(a.trim())).filter(Boolean);
    const etcdSets = new Set();
    for (const m of members) {
      const [pod, service] = m.host.split(".");
      const e = workloads.find((x) => x.o.kind === "StatefulSet" && x.o.spec?.serviceName === service &&
        pod.startsWith(`${x.o.metadata.name}-`));
      if (e) etcdSets.add(e);
    }
    for (const e of etcdSets) {
      const ewhere = id(e.o);
      const n = Number(e.o.spec?.replicas ?? 1);
      if (n < 3 || n % 2 === 0) err(ewhere, `replicas ${n}: etcd needs an odd number, at least 3, to keep a quorum when one is lost`);
      if ((e.o.spec?.podManagementPolicy ?? "OrderedReady") !== "Parallel") {
        err(ewhere, "podManagementPolicy must be Parallel: a member is ready only once a quorum has formed");
      }
      const pods = statefulPods(e.o.spec?.serviceName).filter((p) => p.startsWith(`${e.o.metadata.name}-`));
      const listed = members.filter((m) => pods.includes(m.host.split(".")[0])).map((m) => m.host.split(".")[0]);
      const notListed = pods.filter((p) => !listed.includes(p));
      if (notListed.length) err(where, `--etcd does not list etcd member(s) ${notListed.join(", ")}`);
      const ec = (e.spec.containers ?? [])[0];
      if (!ec) continue;
      const ef = flagsOf((ec.args ?? []).map((a) => expand(a, envOf(e, ec))));
      const peer = hostPort(flagValue(ef, "--listen-peer-urls")?.replace(/^https?:\/\//, ""));
      const expected = pods.map((p) => `${p}=http://${p}.${e.o.spec.serviceName}:${peer?.port}`).join(",");
      if (flagValue(ef, "--initial-cluster") !== expected) {
        err(ewhere, `--initial-cluster must list every member by its pod name: ${expected} (got ${flagValue(ef, "--initial-cluster")})`);
      }
      if (flagValue(ef, "--initial-advertise-peer-urls") !== `http://${pods[0]}.${e.o.spec.serviceName}:${peer?.port}`) {
        err(ewhere, `--initial-advertise-peer-urls must be http://$(POD_NAME).${e.o.spec.serviceName}:${peer?.port}`);
      }
      if (flagValue(ef, "--name") !== pods[0]) err(ewhere, "--name must be $(POD_NAME), as in --initial-cluster");
      const dataDir = flagValue(ef, "--data-dir") ?? "";
      const claims = new Set((e.o.spec?.volumeClaimTemplates ?? []).map((t) => t.metadata?.name));
      if (!(ec.volumeMounts ?? []).some((m) => claims.has(m.name) && (dataDir === m.mountPath || dataDir.startsWith(`${m.mountPath}/`)))) {
        err(ewhere, `--data-dir ${dataDir || "(none)"} is not on a volumeClaimTemplate: the members would forget the cluster when rescheduled`);
      }
      for (const p of ["startupProbe", "livenessProbe", "readinessProbe"]) {
        const probe = ec[p];
        const port = probe?.httpGet?.port ?? probe?.tcpSocket?.port ?? probe?.grpc?.port;
        if (!probe) err(ewhere, `has no ${p}`);
        else if (port !== undefined && !portOf(ec, port)) err(ewhere, `${p} port ${port} is not among the container's ports`);
      }
      for (const kind of ["requests", "limits"]) {
        for (const res of ["cpu", "memory"]) if (!ec.resources?.[kind]?.[res]) err(ewhere, `has no resources.${kind}.${res}`);
      }
      // Its ports closed to all but Cascade's coordinators and its own members.
      const mine = policies.filter((p) => (p.spec?.policyTypes ?? ["Ingress"]).includes("Ingress") &&
        Object.entries(p.spec?.podSelector?.matchLabels ?? {}).every(([k, v]) => e.meta.labels?.[k] === v));
      if (mine.length === 0) err(ewhere, "no NetworkPolicy selects its pods (the election's store would be open to all)");
      for (const r of mine.flatMap((p) => p.spec?.ingress ?? [])) {
        if (!r.from || r.from.length === 0 || r.from.some((peerSel) => peerSel.ipBlock || peerSel.namespaceSelector || !peerSel.podSelector?.matchLabels)) {
          err(ewhere, "a NetworkPolicy rule admits more than Cascade's and etcd's own pods");
        }
      }
    }
  }
}

// CPU or GPU.
const gpuOf = (c, kind) => Number(c.resources?.[kind]?.["nvidia.com/gpu"] ?? 0);
for (const w of workloads.filter((x) => fromKustomize.has(x.o))) {
  for (const c of containersOf(w)) {
    const where = `${id(w.o)} container ${c.name}`;
    const env = envOf(w, c);
    const device = flagValue(flagsOf((c.args ?? []).map((a) => expand(a, env))), "--device");
    const gpuWorker = GPU && component(w) === "worker";
    if (gpuWorker) {
      if (gpuOf(c, "limits") < 1) err(where, "GPU overlay: needs resources.limits nvidia.com/gpu");
      if (gpuOf(c, "requests") !== gpuOf(c, "limits")) err(where, "GPU overlay: nvidia.com/gpu requests must equal limits");
      if (!/^cuda(:\d+)?$/.test(device ?? "")) err(where, `GPU overlay: --device is ${device}, not cuda:N`);
      if (!/:cuda[^/]*$/.test(c.image ?? "")) err(where, `GPU overlay: image ${c.image} is not a CUDA tag`);
    } else {
      if (gpuOf(c, "limits") || gpuOf(c, "requests")) err(where, "requests a GPU");
      if (component(w) === "worker" && device !== "cpu") err(where, `--device is ${device}, not cpu`);
    }
  }
}

// ---------------------------------------------------------------------------------
for (const n of new Set(notes)) console.log(`note: ${n}`);
if (errors.length) {
  const unique = [...new Set(errors)];
  console.error(`${opts.rendered} (${opts.profile}): ${unique.length} error(s):`);
  for (const e of unique) console.error(`  ${e}`);
  process.exit(1);
}
const kinds = [...kindsSeen].map(([k, n]) => `${n} ${k.split(" ")[1]}`).join(", ");
console.log(`${opts.profile}: ${all.length} objects valid (${kinds}); references, probes, resources, security, network policies ok`);
