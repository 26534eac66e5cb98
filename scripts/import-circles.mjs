// Lists the import circles between the files of each package's `src`, type-only
// imports included (a type circle still ties two files into one unit to read,
// build and move), and exits 1 when there is any. Part of `pnpm test`.
//
//   node scripts/import-circles.mjs [package directory …]
//
// Imports are read and resolved with the TypeScript compiler the workspace
// already has, under each package's own tsconfig, so `.js` specifiers, `#`
// imports and the `@rayo/source` condition resolve as the compiler sees them.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** At most this many circles are printed (and counted) per group of files that reach each other. */
const MAX_CIRCLES_SHOWN = 20;

/** Every TypeScript file under `dir`. */
function sourceFiles(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'node_modules' ? [] : sourceFiles(path);
    return /\.(m|c)?tsx?$/.test(name) ? [path] : [];
  });
}

/** The module specifiers a file names, each with whether every naming of it is type-only. */
function specifiersOf(path) {
  const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
  const found = new Map();
  const add = (node, typeOnly) => {
    if (!node || !ts.isStringLiteralLike(node)) return;
    found.set(node.text, (found.get(node.text) ?? true) && typeOnly);
  };
  const visit = (node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const typeOnly =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined &&
            clause.namedBindings !== undefined &&
            ts.isNamedImports(clause.namedBindings) &&
            clause.namedBindings.elements.length > 0 &&
            clause.namedBindings.elements.every((e) => e.isTypeOnly)));
      add(node.moduleSpecifier, typeOnly);
    } else if (ts.isExportDeclaration(node)) {
      const clause = node.exportClause;
      const typeOnly =
        node.isTypeOnly ||
        (clause !== undefined &&
          ts.isNamedExports(clause) &&
          clause.elements.length > 0 &&
          clause.elements.every((e) => e.isTypeOnly));
      add(node.moduleSpecifier, typeOnly);
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add(node.moduleReference.expression, node.isTypeOnly);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(node.argument.literal, true);
    } else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === 'require'))
    ) {
      add(node.arguments[0], false);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The compiler options of a package; resolved a second time as a bundler would, for `browser`-only targets. */
function resolutionModes(packageDir) {
  const configPath = join(packageDir, 'tsconfig.json');
  const parsed = ts.getParsedCommandLineOfConfigFile(
    configPath,
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic() {} },
  );
  if (!parsed) throw new Error(`cannot read ${relative(root, configPath)}`);
  const options = parsed.options;
  const bundler = {
    ...options,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  };
  return [options, bundler].map((mode) => ({
    options: mode,
    cache: ts.createModuleResolutionCache(packageDir, (name) => name, mode),
  }));
}

/** file → (imported file → type-only), for the files of `packageDir/src`. */
function importGraph(packageDir) {
  const srcDir = join(packageDir, 'src');
  const modes = resolutionModes(packageDir);
  const files = sourceFiles(srcDir);
  const graph = new Map();
  for (const file of files) {
    const edges = new Map();
    for (const [specifier, typeOnly] of specifiersOf(file)) {
      for (const { options, cache } of modes) {
        const resolved = ts.resolveModuleName(specifier, file, options, ts.sys, cache);
        const target = resolved.resolvedModule?.resolvedFileName;
        if (!target || relative(srcDir, target).startsWith('..') || target.includes('node_modules')) continue;
        const key = resolve(target);
        edges.set(key, (edges.get(key) ?? true) && typeOnly);
      }
    }
    graph.set(resolve(file), edges);
  }
  return graph;
}

/** Tarjan's strongly connected components: the groups of files that reach each other. */
function stronglyConnected(graph) {
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const groups = [];
  let next = 0;
  const connect = (v) => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v)?.keys() ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) === index.get(v)) {
      const group = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      groups.push(group);
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) connect(v);
  return groups.filter((g) => g.length > 1 || graph.get(g[0])?.has(g[0]));
}

/** The elementary circles inside one group, each starting at its smallest file, up to `limit`. */
function circlesIn(group, graph, limit) {
  const members = [...group].sort();
  const order = new Map(members.map((f, i) => [f, i]));
  const circles = [];
  for (const start of members) {
    const path = [start];
    const onPath = new Set(path);
    const walk = (v) => {
      for (const w of [...(graph.get(v)?.keys() ?? [])].sort()) {
        if (circles.length >= limit) return;
        if (w === start) circles.push([...path, start]);
        else if (order.has(w) && order.get(w) > order.get(start) && !onPath.has(w)) {
          path.push(w);
          onPath.add(w);
          walk(w);
          onPath.delete(w);
          path.pop();
        }
      }
    };
    walk(start);
  }
  return circles;
}

const packageDirs =
  process.argv.length > 2
    ? process.argv.slice(2).map((p) => resolve(p))
    : readdirSync(join(root, 'packages'))
        .map((name) => join(root, 'packages', name))
        .filter((dir) => existsSync(join(dir, 'src')) && existsSync(join(dir, 'tsconfig.json')));

let total = 0;
let fileCount = 0;
for (const packageDir of packageDirs) {
  const graph = importGraph(packageDir);
  fileCount += graph.size;
  const srcDir = join(packageDir, 'src');
  for (const group of stronglyConnected(graph)) {
    const circles = circlesIn(group, graph, MAX_CIRCLES_SHOWN + 1);
    total += Math.min(circles.length, MAX_CIRCLES_SHOWN);
    console.log(`${relative(root, srcDir)}: ${group.length} files import each other`);
    for (const circle of circles.slice(0, MAX_CIRCLES_SHOWN)) {
      const steps = circle.map((file, i) => {
        const name = relative(srcDir, file);
        const typeOnly = i > 0 && graph.get(circle[i - 1]).get(file);
        return i === 0 ? name : `${typeOnly ? '-(type)->' : '->'} ${name}`;
      });
      console.log(`  ${steps.join(' ')}`);
    }
    if (circles.length > MAX_CIRCLES_SHOWN) console.log(`  … and more`);
  }
}
if (total > 0) {
  console.error(`import-circles: ${total} circle(s); move what both files need into a file of its own`);
  process.exit(1);
}
console.log(`import-circles: no circles among ${fileCount} files of ${packageDirs.length} package(s)`);
