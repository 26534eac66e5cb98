export { RENDEZVOUS_RANK_PROGRAM } from './rankPrograms.js';
