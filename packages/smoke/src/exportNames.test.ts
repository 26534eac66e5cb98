import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// A program that imports @rayo/core and @rayo/train needs no renaming: an
// export name (value or type) of @rayo/train that @rayo/core also exports is
// the very same declaration, re-exported. Read from the sources with the
// type checker, so type-only names count too and no build is needed.

const WORKSPACE = fileURLToPath(new URL('../../../', import.meta.url));
// Creating the program parses both packages' sources; on a loaded 2-core machine.
const SLOW = 2 * 60_000;

function sourceEntry(dir: string): string {
  const manifest = JSON.parse(readFileSync(join(WORKSPACE, 'packages', dir, 'package.json'), 'utf8')) as {
    exports: { '.': { '@rayo/source': string } };
  };
  return join(WORKSPACE, 'packages', dir, manifest.exports['.']['@rayo/source']);
}

/** Each export name of the module, with the declaration it stands for. */
function exportsOf(checker: ts.TypeChecker, file: ts.SourceFile): Map<string, ts.Symbol> {
  const module = checker.getSymbolAtLocation(file);
  if (!module) throw new Error(`${file.fileName} is not a module`);
  return new Map(
    checker
      .getExportsOfModule(module)
      .map((s) => [s.name, s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s]),
  );
}

describe('export names of @rayo/core and @rayo/train', () => {
  it(
    'mean one thing: a name in both is the same declaration',
    () => {
      const entries = [sourceEntry('core'), sourceEntry('train')] as const;
      const program = ts.createProgram([...entries], {
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        target: ts.ScriptTarget.ES2023,
        customConditions: ['@rayo/source'],
        noEmit: true,
        skipLibCheck: true,
        types: [],
      });
      const checker = program.getTypeChecker();
      const [core, train] = entries.map((f) => exportsOf(checker, program.getSourceFile(f)!));
      expect(core!.size).toBeGreaterThan(100);
      expect(train!.has('autograd')).toBe(true);
      const shared = [...train!].filter(([name]) => core!.has(name));
      const twoMeanings = shared.filter(([name, symbol]) => core!.get(name) !== symbol).map(([name]) => name);
      expect(twoMeanings).toEqual([]);
    },
    SLOW,
  );
});
