# Install rules and the Debian package (issue 23). `cpack -G DEB` in a build folder, or
# scripts/package.sh, writes tandem_<version>_<arch>.deb with
#   /usr/bin/tandem
#   /lib/systemd/system/tandem-*.service   every unit of configs/systemd/, naming /usr/bin/tandem
#   /etc/tandem/job.yaml                    configs/two-hosts.yaml, a conffile, to edit
#   /usr/share/doc/tandem/                  README.md, examples/ (configs/*.yaml and README.md),
#                                           copyright, changelog.gz
#   /usr/share/man/man1/tandem.1.gz         packaging/tandem.1
# and packaging/deb/'s maintainer scripts: postinst makes the `tandem` system user and group,
# /var/lib/tandem and /etc/tandem/keys and enables nothing; prerm stops the daemons on removal.
# Depends: what dpkg-shlibdeps finds for the binary, and adduser. A CUDA build links NVIDIA's
# libraries from /usr/local/cuda, which no Debian package provides: they are not in Depends and
# must be on every host (-DTANDEM_CUDA=OFF for a package without them).
#
# The units (and `cmake --install`) use absolute /lib/systemd/system and /etc/tandem; the units
# name the binary under the install prefix (/usr in the package), substituted at install time.

set(CPACK_PACKAGE_NAME tandem)
set(CPACK_PACKAGE_VENDOR "tandem")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "recommendation-model training on parameter servers with provable recovery")
# The synopsis is the summary; this is the extended description under it.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "tandem trains recommendation models (DLRM) with huge embedding tables held by
RocksDB-backed parameter-server shards and data-parallel dense workers, and
recovers from crashed, hung or partitioned processes from committed
checkpoints. One binary runs the chief, the shards and the workers; the
systemd units tandem-chief, tandem-ps@ and tandem-worker@ run them on bare
metal from the job config /etc/tandem/job.yaml; tandem-serve answers
TF-Serving-style predict requests from a bundle or a live checkpoint.")

set(TANDEM_DEB_MAINTAINER "tandem maintainers <maintainers@users.noreply.a-seed-12d618a9.example>"
    CACHE STRING "Maintainer field of the Debian package")

install(TARGETS tandem RUNTIME DESTINATION bin)
# The CUDA plugin where the binary looks first: <bin>/../lib/tandem/ (worker/device/cuda_plugin_loader.h).
if(TARGET tandem_cuda_plugin)
  install(TARGETS tandem_cuda_plugin LIBRARY DESTINATION lib/tandem)
endif()

# The source units name /usr/bin/tandem (what the package installs; tests/systemd_units_test.sh
# verifies them). Another install prefix gets its own path.
install(CODE "set(TANDEM_UNIT_SOURCE_DIR \"${PROJECT_SOURCE_DIR}/configs/systemd\")")
install(CODE [[
  file(GLOB units "${TANDEM_UNIT_SOURCE_DIR}/*.service")
  foreach(unit IN LISTS units)
    get_filename_component(name "${unit}" NAME)
    file(READ "${unit}" text)
    string(REPLACE "=/usr/bin/tandem " "=${CMAKE_INSTALL_PREFIX}/bin/tandem " text "${text}")
    string(REPLACE "file:///usr/share/doc/tandem/"
           "file://${CMAKE_INSTALL_PREFIX}/share/doc/tandem/" text "${text}")
    set(dest "/lib/systemd/system/${name}")
    message(STATUS "Installing: $ENV{DESTDIR}${dest}")
    file(WRITE "$ENV{DESTDIR}${dest}" "${text}")
    file(CHMOD "$ENV{DESTDIR}${dest}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${dest}")
  endforeach()
]])

install(FILES "${PROJECT_SOURCE_DIR}/configs/two-hosts.yaml" DESTINATION /etc/tandem
        RENAME job.yaml)
install(FILES "${PROJECT_SOURCE_DIR}/README.md" DESTINATION share/doc/tandem)
install(FILES "${PROJECT_SOURCE_DIR}/configs/README.md" "${PROJECT_SOURCE_DIR}/configs/local.yaml"
              "${PROJECT_SOURCE_DIR}/configs/two-hosts.yaml"
        DESTINATION share/doc/tandem/examples)

# Debian wants a copyright file, a changelog (changelog.gz: a native package) and a manual page,
# compressed with gzip -9n. configure_file makes an edit of a source re-run this.
string(TIMESTAMP TANDEM_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)  # honours SOURCE_DATE_EPOCH
set(pkg_dir "${CMAKE_CURRENT_BINARY_DIR}/packaging")
configure_file("${PROJECT_SOURCE_DIR}/packaging/deb/changelog.in" "${pkg_dir}/changelog" @ONLY)
configure_file("${PROJECT_SOURCE_DIR}/packaging/tandem.1" "${pkg_dir}/tandem.1" COPYONLY)
foreach(f changelog tandem.1)
  execute_process(COMMAND gzip -9nf "${pkg_dir}/${f}" RESULT_VARIABLE gzip_rc)
  if(NOT gzip_rc EQUAL 0)
    message(FATAL_ERROR "gzip of ${pkg_dir}/${f} failed")
  endif()
endforeach()
install(FILES "${pkg_dir}/changelog.gz" "${PROJECT_SOURCE_DIR}/packaging/deb/copyright"
        DESTINATION share/doc/tandem)
install(FILES "${pkg_dir}/tandem.1.gz" DESTINATION share/man/man1)

# cpack (and the install target) take what the build made: without this, cpack's `preinstall`
# step would build every target first (and rebuild what a new git commit touches through the
# build id) in the middle of DebianPackageTest. scripts/package.sh builds `tandem` itself.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # tandem_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${TANDEM_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")  # postinst; dpkg-shlibdeps's list is added to it
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/deb/postinst" "${PROJECT_SOURCE_DIR}/packaging/deb/prerm"
    "${PROJECT_SOURCE_DIR}/packaging/deb/postrm" "${PROJECT_SOURCE_DIR}/packaging/deb/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)
