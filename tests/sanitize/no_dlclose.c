/* Preloaded into the sanitizer build's MPI runs: dlclose does nothing, so the Open MPI components
 * loaded with dlopen stay mapped until exit and LeakSanitizer can name them in its reports (and
 * the suppressions in lsan.supp can match them). Without it their frames are "<unknown module>". */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
