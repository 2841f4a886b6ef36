// Validates a multi-document YAML stream of Kubernetes objects (the output
// of tests/helm/render, or of `helm template`) against the API schemas.
//
//   node tests/helm/validate.mjs [FILE]...      (no FILE: read stdin)
//
// Each object is checked with the schema of its apiVersion and kind from the
// npm packages kubernetes-models (built-in kinds) and
// @kubernetes-models/prometheus-operator (ServiceMonitor, PrometheusRule...),
// installed in tools/node_modules. Beyond the schemas, as the API server or
// `kubectl apply` (strict field validation) would, it also rejects
//   - kinds neither package knows,
//   - fields the schema does not have (a misspelt or misindented key),
//   - a missing or malformed metadata.name, and malformed labels.
// YAML is read as YAML 1.1, as Kubernetes reads it (a bare `yes` is true).
//
// Prints "ok KIND NAME" or "FAIL KIND NAME: reason" per object, then
// "validate: N objects, all valid" (exit 0) or the failures (exit 1).

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

// The packages live in tools/node_modules (see tools/package.json).
const require = createRequire(new URL("../../tools/package.json", import.meta.url));
const YAML = require("yaml");
const modelPackages = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

// modelFor returns the model class of apiVersion and kind, or null. Models
// are exported per group version: "apps/v1" -> kubernetes-models/apps/v1.
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" ||
      !/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion)) {
    return null;
  }
  for (const pkg of modelPackages) {
    let exported;
    try {
      exported = require(`${pkg}/${apiVersion}`);
    } catch {
      continue;  // the package has no such group version
    }
    const model = exported[kind];
    if (model && model.kind === kind && model.apiVersion === apiVersion) return model;
  }
  return null;
}

// trackReads wraps an object tree so that every property the schema
// validator looks up is recorded in `reads` (a Map: object -> Set of keys).
// The validators are compiled JSON schemas that look up each property the
// schema defines, so a key never looked up is one the schema lacks. Objects
// none of whose keys are looked up are free-form (maps are iterated, so
// every key of a map counts as looked up).
function trackReads(value, reads) {
  if (value === null || typeof value !== "object") return value;
  const seen = new Set();
  reads.set(value, seen);
  const children = new Map();
  const record = (key) => { if (typeof key === "string") seen.add(key); };
  return new Proxy(value, {
    get(target, key) {
      record(key);
      const v = Reflect.get(target, key);
      if (typeof key !== "string" || !Object.hasOwn(target, key) ||
          v === null || typeof v !== "object") {
        return v;
      }
      if (!children.has(key)) children.set(key, trackReads(v, reads));
      return children.get(key);
    },
    has(target, key) { record(key); return Reflect.has(target, key); },
    getOwnPropertyDescriptor(target, key) {
      record(key);
      return Reflect.getOwnPropertyDescriptor(target, key);
    },
  });
}

// unknownFields lists the paths of keys the validator never looked up, in
// objects of which it looked up some keys. The compiled schemas leave out
// the x-kubernetes-* extensions of a CRD's schema, so those are let through.
function unknownFields(value, reads, path = "") {
  if (value === null || typeof value !== "object") return [];
  const found = [];
  const seen = reads.get(value);
  for (const [key, child] of Object.entries(value)) {
    const childPath = `${path}/${key}`;
    if (!Array.isArray(value) && seen && seen.size > 0 && !seen.has(key) &&
        !key.startsWith("x-kubernetes-")) {
      found.push(childPath);
    } else {
      found.push(...unknownFields(child, reads, childPath));
    }
  }
  return found;
}

// Name and label rules of the API server, which the schemas do not carry.
const dnsSubdomain = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const dnsLabel = /^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const dns1035Label = /^(?=.{1,63}$)[a-z]([-a-z0-9]*[a-z0-9])?$/;
const labelName = /^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const labelValue = /^(?=.{0,63}$)([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;

function nameProblems(obj) {
  const name = obj.metadata?.name;
  if (typeof name !== "string") return ["metadata.name is required"];
  const [rule, what] = obj.kind === "Service" ? [dns1035Label, "a DNS-1035 label"]
    : obj.kind === "Namespace" ? [dnsLabel, "a DNS-1123 label"]
    : [dnsSubdomain, "a DNS-1123 subdomain"];
  return rule.test(name) ? [] : [`metadata.name "${name}" is not ${what}`];
}

function labelProblems(obj) {
  const problems = [];
  const check = (where, labels) => {
    if (labels === null || typeof labels !== "object") return;
    for (const [key, value] of Object.entries(labels)) {
      const slash = key.lastIndexOf("/");
      const prefix = slash < 0 ? null : key.slice(0, slash);
      if (!labelName.test(key.slice(slash + 1)) || (prefix !== null && !dnsSubdomain.test(prefix))) {
        problems.push(`${where}: bad label key "${key}"`);
      }
      if (typeof value !== "string" || !labelValue.test(value)) {
        problems.push(`${where}: bad value ${JSON.stringify(value)} of label "${key}"`);
      }
    }
  };
  check("metadata.labels", obj.metadata?.labels);
  check("spec.template.metadata.labels", obj.spec?.template?.metadata?.labels);
  check("spec.selector.matchLabels", obj.spec?.selector?.matchLabels);
  if (obj.kind === "Service") check("spec.selector", obj.spec?.selector);
  return problems;
}

// problemsOf returns what is wrong with one object (empty: it is valid).
function problemsOf(obj) {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    return ["a document is not an object"];
  }
  const model = modelFor(obj.apiVersion, obj.kind);
  if (!model) return [`unknown kind ${obj.kind} of apiVersion ${obj.apiVersion}`];
  const problems = [];
  const reads = new Map();
  try {
    model.prototype.validate.call(trackReads(obj, reads));
  } catch (err) {
    problems.push(err.message);
  }
  problems.push(...unknownFields(obj, reads).map((path) => `unknown field ${path}`));
  return [...problems, ...nameProblems(obj), ...labelProblems(obj)];
}

const inputs = process.argv.length > 2 ? process.argv.slice(2) : ["/dev/stdin"];
let count = 0;
const failures = [];
for (const input of inputs) {
  for (const doc of YAML.parseAllDocuments(readFileSync(input, "utf8"), { version: "1.1" })) {
    let obj = null;
    let problems = doc.errors.map((e) => `YAML: ${e.message.split("\n")[0]}`);
    if (problems.length === 0) {
      obj = doc.toJS();
      if (obj === null) continue;  // an empty or comment-only document
      problems = problemsOf(obj);
    }
    count++;
    const label = `${obj?.kind ?? "?"} ${obj?.metadata?.name ?? "?"}`;
    if (problems.length === 0) {
      console.log(`ok ${label}`);
    } else {
      console.log(`FAIL ${label}: ${problems.join("; ")}`);
      failures.push(label);
    }
  }
}
if (count === 0) {
  console.log("validate: no objects in the input");
  process.exit(1);
}
if (failures.length > 0) {
  console.log(`validate: ${count} objects, ${failures.length} invalid: ${failures.join(", ")}`);
  process.exit(1);
}
console.log(`validate: ${count} objects, all valid`);
