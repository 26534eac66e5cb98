// Node-only helpers (child processes, files); the main entry stays free of Node APIs.
export {
  findPackageScript,
  type PythonScriptOutcome,
  type PythonScriptOutput,
  type PythonScriptRun,
  runPythonScript,
} from './pythonScript.js';
